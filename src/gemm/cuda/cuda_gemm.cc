// The cuda side of tessera::gemm::Gemm (gemm_backend.h): the Hopper building block through its
// launcher registry (kernels/gemm/gemm_launch.h), or cuBLASLt.
#include <cuda_runtime.h>

#include "gemm/cuda/blaslt_gemm.h"
#include "gemm/gemm_backend.h"
#include "gemm/gemm_launch.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::gemm::detail {

namespace {

bool element_type(DType dtype, kernels::ElementType& out) {
  switch (dtype) {
    case DType::kBF16: out = kernels::ElementType::kBF16; return true;
    case DType::kF16: out = kernels::ElementType::kF16; return true;
    case DType::kF32: out = kernels::ElementType::kF32; return true;
    default: return false;
  }
}

kernels::GemmLaunchFn hopper_kernel(const GemmShape& shape) {
  kernels::GemmKey key;
  key.weight_nk = shape.weight_nk;
  if (!element_type(shape.dtype, key.in) || !element_type(shape.out_dtype, key.out)) return nullptr;
  // TMA needs 16-byte aligned rows: K and N multiples of 8 for 16-bit types.
  if (shape.k % 8 != 0 || shape.n % 8 != 0) return nullptr;
  return kernels::find_gemm_kernel(key);
}

class HopperGemm final : public CudaGemm {
 public:
  HopperGemm(const GemmShape& shape, Device device, kernels::GemmLaunchFn launch)
      : shape_(shape), launch_(launch) {
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device.index));
    workspace_ = Buffer::allocate(kernels::kGemmWorkspaceBytes, device);
  }
  GemmImpl impl() const override { return GemmImpl::kHopper; }
  void run(const void* a, const void* b, const void* bias, void* out,
           const Stream& stream) const override {
    kernels::GemmProblem p;
    p.m = shape_.m;
    p.n = shape_.n;
    p.k = shape_.k;
    p.a = a;
    p.b = b;
    p.bias = bias;
    p.d = out;
    p.device_sms = sms_;
    const cudaError_t status = launch_(p, workspace_.data(), kernels::kGemmWorkspaceBytes,
                                       static_cast<cudaStream_t>(stream.cuda_stream()));
    TESSERA_CHECK(status == cudaSuccess, ErrorCode::kCuda, "GEMM building block M ", shape_.m,
                  " N ", shape_.n, " K ", shape_.k, ": ", cudaGetErrorString(status));
  }

 private:
  GemmShape shape_;
  kernels::GemmLaunchFn launch_;
  int sms_ = 0;
  Buffer workspace_;
};

class CublasLtGemm final : public CudaGemm {
 public:
  CublasLtGemm(const GemmShape& shape, Device device) : gemm_(shape) {
    workspace_ = Buffer::allocate(BlasLtGemm::kWorkspaceBytes, device);
  }
  GemmImpl impl() const override { return GemmImpl::kCublasLt; }
  void run(const void* a, const void* b, const void* bias, void* out,
           const Stream& stream) const override {
    gemm_.run(a, b, bias, out, workspace_.data(), static_cast<cudaStream_t>(stream.cuda_stream()));
  }

 private:
  BlasLtGemm gemm_;
  Buffer workspace_;
};

}  // namespace

bool hopper_available(const GemmShape& shape) { return hopper_kernel(shape) != nullptr; }

std::unique_ptr<CudaGemm> make_cuda_gemm(const GemmShape& shape, Device device, GemmImpl impl) {
  if (impl == GemmImpl::kHopper) {
    const kernels::GemmLaunchFn launch = hopper_kernel(shape);
    TESSERA_CHECK(launch != nullptr, ErrorCode::kUnsupported, "the GEMM building block for ",
                  dtype_name(shape.dtype), " -> ", dtype_name(shape.out_dtype),
                  shape.weight_nk ? ", weight [N, K]" : ", weight [K, N]", ", N ", shape.n, " K ",
                  shape.k,
                  ": not built (bf16 or f16 in and out, N and K multiples of 8; "
                  "TESSERA_KERNEL_FILTER may leave instantiations out): expected kCublasLt");
    return std::make_unique<HopperGemm>(shape, device, launch);
  }
  return std::make_unique<CublasLtGemm>(shape, device);
}

}  // namespace tessera::gemm::detail
