// Internal: the cuda side of tessera::gemm::Gemm (src/gemm/cuda/, built with TESSERA_CUDA=ON).
#pragma once

#include <memory>

#include "tessera/gemm/gemm.h"

namespace tessera::gemm::detail {

#ifdef TESSERA_WITH_CUDA
class CudaGemm {
 public:
  virtual ~CudaGemm() = default;
  virtual GemmImpl impl() const = 0;
  virtual void run(const void* a, const void* b, const void* bias, void* out,
                   const Stream& stream) const = 0;
};
// kHopper or kCublasLt (kAuto resolved by the caller's rule: hopper_available()).
std::unique_ptr<CudaGemm> make_cuda_gemm(const GemmShape& shape, Device device, GemmImpl impl);
bool hopper_available(const GemmShape& shape);
#endif

}  // namespace tessera::gemm::detail
