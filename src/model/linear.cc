#include "linear.h"

#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"

namespace tessera::model {

void linear(const float* x, int64_t rows, int64_t in_features, const std::vector<float>& weight,
            const std::vector<float>& bias, float* out, int64_t out_features,
            const Stream& stream) {
  TESSERA_CHECK(int64_t(weight.size()) == out_features * in_features, ErrorCode::kInternal,
                "linear: weight has ", weight.size(), " elements, expected ", out_features, " x ",
                in_features);
  if (rows == 0) return;
  const Device cpu = Device::cpu();
  gemm::GemmShape shape{rows,        out_features, in_features,  DType::kF32,
                        DType::kF32, true,         !bias.empty()};
  const gemm::Gemm gemm(shape, cpu);
  const TensorView bias_view =
      bias.empty() ? TensorView()
                   : TensorView(const_cast<float*>(bias.data()), DType::kF32, cpu, {out_features});
  gemm.run(
      TensorView(const_cast<float*>(x), DType::kF32, cpu, {rows, in_features}),
      TensorView(const_cast<float*>(weight.data()), DType::kF32, cpu, {out_features, in_features}),
      bias_view, TensorView(out, DType::kF32, cpu, {rows, out_features}), stream);
}

}  // namespace tessera::model
