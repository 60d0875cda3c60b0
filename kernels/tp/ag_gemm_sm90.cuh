// The AllGather+GEMM kernel: the GEMM building block (gemm/gemm_sm90.cuh) on a cooperative
// tile, with the ArrivalScheduler (arrival_scheduler.cuh) in place of its own, so tiles are
// visited in the plan's order and wait for their rows of the gathered A.
#pragma once

#include "gemm/gemm_sm90.cuh"
#include "tp/ag_gemm_launch.h"
#include "tp/arrival_scheduler.cuh"

namespace tessera::tp::kernels::sm90 {

template <class ElementIn, bool kWeightNK, gemm::GemmTile kTile>
using AgGemmTraits =
    gemm::kernels::sm90::GemmTraits<ElementIn, ElementIn, kWeightNK, kTile, ArrivalScheduler>;

template <class Traits>
cudaError_t launch_ag_gemm(const gemm::kernels::GemmProblem& p, const gemm::GemmConfig& config,
                           const ArrivalWait& wait, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  if (config.split != gemm::GemmSplit::kDataParallel) return cudaErrorInvalidValue;
  auto args = gemm::kernels::sm90::gemm_arguments<Traits>(p, config);
  args.scheduler.wait = wait;
  // Rows outermost: a wave covers few row clusters, taken in the plan's order.
  using Scheduler = typename Traits::Gemm::GemmKernel::TileScheduler;
  args.scheduler.raster_order = Scheduler::RasterOrderOptions::AlongN;
  return gemm::kernels::sm90::launch_with_arguments<Traits>(args, workspace, workspace_bytes,
                                                            stream);
}

template <class Traits>
bool register_ag_traits(gemm::kernels::ElementType element) {
  return register_ag_gemm_kernel(
      {element, element, Traits::kWeightNK, Traits::kTile, {}},
      {&launch_ag_gemm<Traits>, &gemm::kernels::sm90::gemm_workspace_bytes<Traits>});
}

}  // namespace tessera::tp::kernels::sm90
