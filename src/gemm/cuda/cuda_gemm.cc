// The cuda side of tessera::gemm::Gemm (gemm_backend.h): the Hopper building block through its
// launcher registry (kernels/gemm/gemm_launch.h), or cuBLASLt.
#include <cuda_runtime.h>

#include <algorithm>

#include "gemm/cuda/blaslt_gemm.h"
#include "gemm/gemm_backend.h"
#include "gemm/gemm_launch.h"
#include "gemm/skinny_gemm_launch.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::gemm::detail {

namespace {

const Param<std::string> kGemmKernelVariant(
    "TESSERA_GEMM_KERNEL", "",
    "GEMM building block variant to run (tuning builds register named ones; empty: production)");

bool element_type(DType dtype, kernels::ElementType& out) {
  switch (dtype) {
    case DType::kBF16:
      out = kernels::ElementType::kBF16;
      return true;
    case DType::kF16:
      out = kernels::ElementType::kF16;
      return true;
    case DType::kF32:
      out = kernels::ElementType::kF32;
      return true;
    default:
      return false;
  }
}

kernels::GemmLauncher hopper_kernel(const GemmShape& shape, GemmTile tile) {
  kernels::GemmKey key;
  key.weight_nk = shape.weight_nk;
  key.tile = tile;
  if (!element_type(shape.dtype, key.in) || !element_type(shape.out_dtype, key.out)) return {};
  // TMA needs 16-byte aligned rows: K and N multiples of 8 for 16-bit types.
  if (shape.k % 8 != 0 || shape.n % 8 != 0) return {};
  // A tuning variant where one is registered for the key, production otherwise.
  static const std::string variant = kGemmKernelVariant.get();  // read once
  if (!variant.empty()) {
    key.variant = variant;
    if (const kernels::GemmLauncher launcher = kernels::find_gemm_kernel(key)) return launcher;
    key.variant = {};
  }
  return kernels::find_gemm_kernel(key);
}

int multiprocessors(Device device) {
  int sms = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index));
  return sms;
}

class HopperGemm final : public CudaGemm {
 public:
  HopperGemm(const GemmShape& shape, Device device, const GemmConfig& config,
             kernels::GemmLauncher launcher, int sms)
      : shape_(shape), config_(config), launcher_(launcher) {
    problem_.m = shape.m;
    problem_.n = shape.n;
    problem_.k = shape.k;
    // run() may take any share of the multiprocessors, and stream-K's workspace depends on the
    // grid: the largest any share needs, allocated once (run() allocates nothing).
    for (int share = kernels::kGemmClusterCtas; share <= sms; ++share) {
      kernels::GemmProblem p = problem_;
      p.device_sms = share;
      workspace_bytes_ = std::max(workspace_bytes_, launcher_.workspace_bytes(p, config_));
    }
    problem_.device_sms = sms;
    if (workspace_bytes_ > 0) workspace_ = Buffer::allocate(workspace_bytes_, device);
  }
  GemmImpl impl() const override { return GemmImpl::kHopper; }
  std::string config_name() const override { return gemm_config_name(config_); }
  void run(const void* a, const void* b, const void* bias, void* out, const Stream& stream,
           int max_sms) const override {
    kernels::GemmProblem p = problem_;
    if (max_sms > 0) p.device_sms = std::clamp(max_sms, kernels::kGemmClusterCtas, p.device_sms);
    p.a = a;
    p.b = b;
    p.bias = bias;
    p.d = out;
    const cudaError_t status =
        launcher_.launch(p, config_, workspace_bytes_ > 0 ? workspace_.data() : nullptr,
                         workspace_bytes_, static_cast<cudaStream_t>(stream.cuda_stream()));
    TESSERA_CHECK(status == cudaSuccess, ErrorCode::kCuda, "GEMM building block M ", shape_.m,
                  " N ", shape_.n, " K ", shape_.k, " (", gemm_config_name(config_), ") on ",
                  p.device_sms, " multiprocessors: ", cudaGetErrorString(status));
  }

 private:
  GemmShape shape_;
  GemmConfig config_;
  kernels::GemmLauncher launcher_;
  kernels::GemmProblem problem_;
  size_t workspace_bytes_ = 0;
  Buffer workspace_;
};

class CublasLtGemm final : public CudaGemm {
 public:
  CublasLtGemm(const GemmShape& shape, Device device) : gemm_(shape) {
    workspace_ = Buffer::allocate(BlasLtGemm::kWorkspaceBytes, device);
  }
  GemmImpl impl() const override { return GemmImpl::kCublasLt; }
  std::string config_name() const override { return ""; }
  void run(const void* a, const void* b, const void* bias, void* out, const Stream& stream,
           int max_sms) const override {
    gemm_.run(a, b, bias, out, workspace_.data(), static_cast<cudaStream_t>(stream.cuda_stream()),
              max_sms);
  }

 private:
  BlasLtGemm gemm_;
  Buffer workspace_;
};

class SkinnyGemm final : public CudaGemm {
 public:
  explicit SkinnyGemm(const GemmShape& shape) {
    p_.m = shape.m;
    p_.n = shape.n;
    p_.k = shape.k;
    element_type(shape.dtype, p_.in);
    element_type(shape.out_dtype, p_.out);
  }
  GemmImpl impl() const override { return GemmImpl::kSkinny; }
  std::string config_name() const override { return "skinny"; }
  void run(const void* a, const void* b, const void* bias, void* out, const Stream& stream,
           int /*max_sms: a few rows' GEMV takes few multiprocessors anyway*/) const override {
    kernels::SkinnyGemmParams p = p_;
    p.a = a;
    p.b = b;
    p.bias = bias;
    p.d = out;
    kernels::launch_skinny_gemm(p, stream.cuda_stream());
  }

 private:
  kernels::SkinnyGemmParams p_;
};

bool skinny_takes(const GemmShape& shape) {
  kernels::ElementType in{}, out{};
  return shape.weight_nk && element_type(shape.dtype, in) && element_type(shape.out_dtype, out) &&
         kernels::skinny_gemm_supported(in, shape.m, shape.k);
}

}  // namespace

GemmImpl auto_impl(const GemmShape& shape, Device device) {
  if (skinny_takes(shape) && gemm_prefers_skinny(shape.m, shape.n, shape.k)) return GemmImpl::kSkinny;
  if (gemm_prefers_cublaslt(shape.m, shape.n, shape.k)) return GemmImpl::kCublasLt;
  const int sms = multiprocessors(device);
  return hopper_kernel(shape, choose_gemm_config(shape.m, shape.n, shape.k, sms).tile)
             ? GemmImpl::kHopper
             : GemmImpl::kCublasLt;
}

std::unique_ptr<CudaGemm> make_cuda_gemm(const GemmShape& shape, Device device, GemmImpl impl,
                                         const std::optional<GemmConfig>& config) {
  if (impl == GemmImpl::kHopper) {
    const int sms = multiprocessors(device);
    const GemmConfig chosen = config ? *config : choose_gemm_config(shape.m, shape.n, shape.k, sms);
    const kernels::GemmLauncher launcher = hopper_kernel(shape, chosen.tile);
    TESSERA_CHECK(bool(launcher), ErrorCode::kUnsupported, "the GEMM building block for ",
                  dtype_name(shape.dtype), " -> ", dtype_name(shape.out_dtype),
                  shape.weight_nk ? ", weight [N, K]" : ", weight [K, N]", ", N ", shape.n, " K ",
                  shape.k, ", ", gemm_config_name(chosen),
                  ": not built (bf16 or f16 in and out, N and K multiples of 8; "
                  "TESSERA_KERNEL_FILTER may leave instantiations out): expected kCublasLt");
    return std::make_unique<HopperGemm>(shape, device, chosen, launcher, sms);
  }
  if (impl == GemmImpl::kSkinny) {
    TESSERA_CHECK(skinny_takes(shape), ErrorCode::kUnsupported, "the skinny GEMM for M ", shape.m,
                  " K ", shape.k, " ", dtype_name(shape.dtype), " -> ", dtype_name(shape.out_dtype),
                  shape.weight_nk ? "" : ", weight [K, N]",
                  ": it takes M <= 8, weight [N, K], bf16 or f16 in, K a multiple of 8: expected "
                  "kCublasLt");
    return std::make_unique<SkinnyGemm>(shape);
  }
  return std::make_unique<CublasLtGemm>(shape, device);
}

}  // namespace tessera::gemm::detail
