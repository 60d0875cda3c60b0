// Internal: what TpOperation hands the cuda backend after checking every argument.
// Implemented in src/tp/cuda/ (built only with TESSERA_CUDA=ON).
#pragma once

#include <memory>

#include "tessera/comm/context.h"
#include "tessera/tp/plan.h"
#ifdef TESSERA_WITH_CUDA
#include "tp/cuda/phase_clock.h"
#endif

namespace tessera::tp::detail {

#ifdef TESSERA_WITH_CUDA
// A plan on cuda, set up once (descriptors, algorithms, buffers, tables), run on the caller's
// stream without allocating or synchronizing.
class CudaTpRunner {
 public:
  virtual ~CudaTpRunner() = default;
  virtual void run(const TensorView& a, const TensorView& b, const TensorView& bias,
                   const TensorView& out, const Stream& stream) = 0;
  PhaseClock& phases() { return phases_; }

 protected:
  PhaseClock phases_;  // run() marks where each phase ends
};
// The unfused pair: cuBLASLt GEMMs and the Communicator's (NCCL) collectives.
std::unique_ptr<CudaTpRunner> make_cuda_unfused_pair(RankContext& ctx, const TpPlan& plan);
// Throws kUnsupported naming what is not built when the cuda backend cannot run fused `plan`:
// AllGather+GEMM as check_ag_gemm_kernel_supports says; GEMM+ReduceScatter inside one machine
// (not two-level); GEMM+AllToAll inside one machine.
void check_cuda_fused_supported(const TpPlan& plan);
// Fused AllGather+GEMM across the GPUs of one machine (fused_all_gather_cuda.cc): each rank's
// rows pushed by copy engine into every peer's `gathered` buffer on the symmetric heap, a
// stream-written signal per communication chunk, the GEMM kernel waiting per row tile.
std::unique_ptr<CudaTpRunner> make_cuda_fused_all_gather(RankContext& ctx, const TpPlan& plan,
                                                         const SymmetricBuffer& gathered,
                                                         int signal_base);
// Fused GEMM+ReduceScatter across the GPUs of one machine (fused_reduce_scatter_cuda.cc):
// partials computed locally and copied by copy engine into their owners' `partials` blocks, a
// stream-written signal per source, the owner's ordered float32 sum.
std::unique_ptr<CudaTpRunner> make_cuda_fused_reduce_scatter(RankContext& ctx, const TpPlan& plan,
                                                             const SymmetricBuffer& partials,
                                                             int signal_base);
// Fused GEMM+AllToAll across the GPUs of one machine (fused_all_to_all_cuda.cc): each owner's
// column block computed locally and copied by copy engine into this rank's rows of the owner's
// `received`, a stream-written signal per source, the owner's copy into its output.
std::unique_ptr<CudaTpRunner> make_cuda_fused_all_to_all(RankContext& ctx, const TpPlan& plan,
                                                         const SymmetricBuffer& received,
                                                         int signal_base);
#endif

}  // namespace tessera::tp::detail
