// Internal: what TpOperation hands the cuda backend after checking every argument.
// Implemented in src/tp/cuda/ (built only with TESSERA_CUDA=ON).
#pragma once

#include <memory>

#include "tessera/comm/context.h"
#include "tessera/tp/plan.h"

namespace tessera::tp::detail {

#ifdef TESSERA_WITH_CUDA
// The unfused pair on cuda: cuBLASLt GEMMs and the Communicator's (NCCL) collectives, planned
// once (descriptors, algorithms, padded buffers), run on the caller's stream without
// allocating or synchronizing.
class CudaUnfusedPair {
 public:
  virtual ~CudaUnfusedPair() = default;
  virtual void run(const TensorView& a, const TensorView& b, const TensorView& bias,
                   const TensorView& out, const Stream& stream) = 0;
};
std::unique_ptr<CudaUnfusedPair> make_cuda_unfused_pair(RankContext& ctx, const TpPlan& plan);
#endif

}  // namespace tessera::tp::detail
