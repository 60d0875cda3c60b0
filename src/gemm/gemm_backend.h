// Internal: the cuda side of tessera::gemm::Gemm (src/gemm/cuda/, built with TESSERA_CUDA=ON).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tessera/gemm/gemm.h"
#include "tessera/gemm/gemm_config.h"

namespace tessera::gemm::detail {

#ifdef TESSERA_WITH_CUDA
class CudaGemm {
 public:
  virtual ~CudaGemm() = default;
  virtual GemmImpl impl() const = 0;
  virtual std::string config_name() const = 0;  // kHopper's configuration; "" for cuBLASLt
  // max_sms: Gemm::run's (0: all).
  virtual void run(const void* a, const void* b, const void* bias, void* out, const Stream& stream,
                   int max_sms) const = 0;
};
// kHopper, kSkinny or kCublasLt (kAuto resolved by the caller: auto_impl()); kHopper runs
// `config`, or choose_gemm_config()'s pick without one.
std::unique_ptr<CudaGemm> make_cuda_gemm(const GemmShape& shape, Device device, GemmImpl impl,
                                         const std::optional<GemmConfig>& config);
// kAuto's rule: the skinny kernel where it takes the shape and gemm_prefers_skinny; else the
// building block where this build has it and the sweep did not find cuBLASLt ahead
// (gemm_prefers_cublaslt); else cuBLASLt.
GemmImpl auto_impl(const GemmShape& shape, Device device);
#endif

}  // namespace tessera::gemm::detail
