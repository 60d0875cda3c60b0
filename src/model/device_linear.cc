#include "model/device_linear.h"

#include <cstddef>

namespace tessera::model {

void planned_linear(GemmPlans& plans, const TensorView& a, const Tensor& weight, const Tensor& bias,
                    const TensorView& out, DType dtype, Device device, const Stream& stream) {
  const int64_t m = a.size(0), n = weight.view().size(0), k = weight.view().size(1);
  if (m == 0) return;
  const bool has_bias = !bias.view().empty();
  auto& g = plans[{m, n, k, has_bias}];
  if (!g)
    g = std::make_unique<gemm::Gemm>(gemm::GemmShape{m, n, k, dtype, dtype, true, has_bias},
                                     device);
  g->run(a, weight, has_bias ? bias.view() : TensorView(), out, stream);
}

TensorView row_span(const Tensor& t, int64_t first, int64_t n) {
  auto* data = static_cast<std::byte*>(t.data()) + size_t(first) * t.view().element_size();
  return TensorView(data, t.view().dtype(), t.view().device(), {1, n});
}

}  // namespace tessera::model
