// tessera::gemm::Gemm: argument checks, the cpu reference, dispatch to the cuda side.
#include "tessera/gemm/gemm.h"

#include <vector>

#include "gemm/gemm_backend.h"
#include "gemm/reference_gemm.h"
#include "tessera/core/error.h"
#include "tessera/gemm/gemm_config.h"

namespace tessera::gemm {

const char* gemm_impl_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::kAuto:
      return "auto";
    case GemmImpl::kHopper:
      return "tessera";
    case GemmImpl::kCublasLt:
      return "cublaslt";
    case GemmImpl::kSkinny:
      return "skinny";
  }
  return "?";
}

struct Gemm::Impl {
  GemmShape shape;
  Device device;
  GemmImpl chosen = GemmImpl::kCublasLt;
#ifdef TESSERA_WITH_CUDA
  std::unique_ptr<detail::CudaGemm> cuda;
#endif
};

namespace {

bool is_gemm_dtype(DType d) {
  return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32;
}

void check_operand(const TensorView& t, int64_t rows, int64_t cols, DType dtype, Device device,
                   const char* what) {
  TESSERA_CHECK_ARG(!t.empty(), what, ": expected ", dtype_name(dtype), "[", rows, ", ", cols,
                    "], got an empty view");
  TESSERA_CHECK_ARG(t.numel() == rows * cols && (t.ndim() == 2 ? t.size(0) == rows : true), what,
                    " = ", t.to_string(), ": expected shape [", rows, ", ", cols, "]");
  check_dtype(t, dtype, what);
  check_device(t, device, what);
  check_contiguous(t, what);
}

}  // namespace

Gemm::Gemm(const GemmShape& shape, Device device, GemmImpl impl,
           std::optional<GemmConfig> hopper_config)
    : impl_(std::make_unique<Impl>()) {
  TESSERA_CHECK_ARG(shape.m >= 1 && shape.n >= 1 && shape.k >= 1, "shape M ", shape.m, " N ",
                    shape.n, " K ", shape.k, ": expected every size >= 1");
  TESSERA_CHECK_ARG(is_gemm_dtype(shape.dtype), "dtype = ", dtype_name(shape.dtype),
                    ": expected bf16, f16 or f32");
  TESSERA_CHECK_ARG(is_gemm_dtype(shape.out_dtype), "out_dtype = ", dtype_name(shape.out_dtype),
                    ": expected bf16, f16 or f32");
  if (hopper_config) validate_gemm_config(*hopper_config, "hopper_config");
  impl_->shape = shape;
  impl_->device = device;
  if (!device.is_cuda()) {
    (void)hopper_config;  // the cpu reference has no configurations
    impl_->chosen = impl == GemmImpl::kAuto ? GemmImpl::kHopper : impl;
    return;
  }
#ifdef TESSERA_WITH_CUDA
  const GemmImpl resolved = impl == GemmImpl::kAuto ? detail::auto_impl(shape, device) : impl;
  impl_->cuda = detail::make_cuda_gemm(shape, device, resolved, hopper_config);
  impl_->chosen = resolved;
#else
  throw_error(ErrorCode::kUnsupported,
              str("device = ", device.to_string(), ": this build has no cuda backend"));
#endif
}

Gemm::~Gemm() = default;
const GemmShape& Gemm::shape() const {
  return impl_->shape;
}
GemmImpl Gemm::impl() const {
  return impl_->chosen;
}
std::string Gemm::config_name() const {
#ifdef TESSERA_WITH_CUDA
  if (impl_->cuda) return impl_->cuda->config_name();
#endif
  return "";
}

void Gemm::run(const TensorView& a, const TensorView& b, const TensorView& bias,
               const TensorView& out, const Stream& stream, int max_sms) const {
  const GemmShape& s = impl_->shape;
  TESSERA_CHECK_ARG(max_sms >= 0, "max_sms = ", max_sms, ": expected >= 0 (0: every multiprocessor)");
  const Device device = impl_->device;
  check_operand(a, s.m, s.k, s.dtype, device, "a");
  check_operand(b, s.weight_nk ? s.n : s.k, s.weight_nk ? s.k : s.n, s.dtype, device, "b");
  check_operand(out, s.m, s.n, s.out_dtype, device, "out");
  if (s.bias) {
    check_operand(bias, 1, s.n, s.out_dtype, device, "bias");
  } else {
    TESSERA_CHECK_ARG(bias.empty(), "bias = ", bias.to_string(),
                      ": expected an empty view (the shape has no bias)");
  }
  const void* bias_data = s.bias ? bias.data() : nullptr;
#ifdef TESSERA_WITH_CUDA
  if (impl_->cuda)
    return impl_->cuda->run(a.data(), b.data(), bias_data, out.data(), stream, max_sms);
#endif
  TESSERA_CHECK_ARG(stream.backend() == Backend::kCpu, "stream: a ", backend_name(stream.backend()),
                    " stream for a cpu GEMM: expected a cpu stream");
  // The float32 reference, a row block at a time.
  const detail::WeightOperand weight{b.data(), s.dtype, s.weight_nk, s.k, s.n};
  std::vector<float> acc, scratch;
  constexpr int64_t kRows = 64;
  const size_t in_elem = dtype_size(s.dtype), out_elem = dtype_size(s.out_dtype);
  for (int64_t row = 0; row < s.m; row += kRows) {
    const int64_t rows = std::min(kRows, s.m - row);
    acc.resize(size_t(rows * s.n));
    detail::gemm_tile(static_cast<const std::byte*>(a.data()) + size_t(row * s.k) * in_elem, s.k,
                      s.dtype, rows, weight, 0, s.n, scratch, acc.data());
    detail::store_tile(acc.data(), rows, s.n, bias_data, 0, s.out_dtype,
                       static_cast<std::byte*>(out.data()) + size_t(row * s.n) * out_elem, s.n);
  }
}

}  // namespace tessera::gemm
