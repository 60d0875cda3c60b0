// The tile scheduler that carries the AllGather+GEMM hooks (ag_gemm_launch.h): CUTLASS's
// persistent data-parallel scheduler, with each work tile's cluster of row tiles remapped
// through the plan's order, and the producer warp group waiting for the tile's rows to arrive
// before it returns the tile (so before any TMA load of A for it). Consumer warp groups take the
// same remapped tiles without waiting: their data comes through the producer's pipeline.
// A CUTLASS kernel picks it through TileSchedulerSelector with the ArrivalScheduler tag.
#pragma once

#include <cstdio>

#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "comm/cuda/device_primitives.cuh"
#include "tp/ag_gemm_launch.h"

namespace tessera::tp::kernels {

struct ArrivalScheduler {};  // the tag

template <int kClusterM, int kClusterN>
class ArrivalTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using WorkTileInfo = typename Base::WorkTileInfo;
  struct Arguments : Base::Arguments {
    ArrivalWait wait;
  };
  struct Params : Base::Params {
    ArrivalWait wait;
  };

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem, TileShape tile,
                                        ClusterShape cluster,
                                        cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& args, void* workspace = nullptr,
                                        const uint32_t epilogue_subtile = 1,
                                        uint32_t ktile_start_alignment_count = 1u) {
    Params params;
    static_cast<typename Base::Params&>(params) = Base::to_underlying_arguments(
        problem, tile, cluster, hw_info, static_cast<typename Base::Arguments const&>(args),
        workspace, epilogue_subtile, ktile_start_alignment_count);
    params.wait = args.wait;
    return params;
  }

  CUTLASS_HOST_DEVICE static bool can_implement(Arguments const& args) {
    return Base::can_implement(args) && args.wait.words != nullptr &&
           args.wait.tile_chunks != nullptr && args.wait.cluster_order != nullptr &&
           args.wait.m_clusters >= 1 && args.wait.n_tiles >= 1 && args.wait.band_clusters >= 1;
  }

  CUTLASS_DEVICE explicit ArrivalTileScheduler(Params const& params)
      : Base(params), wait_(params.wait) {}

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape cluster_shape) {
    return arrive(Base::initial_work_tile_info(cluster_shape));
  }

  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work) {
    auto [next, increment] = Base::fetch_next_work(work);
    return cute::make_tuple(arrive(next), increment);
  }

  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&, PipelineState) {
    return fetch_next_work(work);
  }

 private:
  // The base scheduler rasters along N, so its visit order over clusters is
  // v = row cluster * column clusters + column cluster. v is renumbered band by band: in band b
  // (band_clusters entries of cluster_order, fewer in the last), visit r = v - b * band_clusters
  // * column clusters takes entry r % rows of the band in column cluster r / rows. A bijection
  // on the clusters; the CTAs of a cluster keep their offsets in it, so they still share the
  // operand they multicast.
  CUTLASS_DEVICE WorkTileInfo arrive(WorkTileInfo work) const {
    if (!work.is_valid()) return work;
    const int n_clusters = (wait_.n_tiles + kClusterN - 1) / kClusterN;
    const int64_t visit = int64_t(work.M_idx / kClusterM) * n_clusters + work.N_idx / kClusterN;
    const int64_t band_size = int64_t(wait_.band_clusters) * n_clusters;
    const int band = int(visit / band_size);
    const int rows = min(wait_.band_clusters, wait_.m_clusters - band * wait_.band_clusters);
    const int64_t r = visit - band * band_size;
    const int entry = band * wait_.band_clusters + int(r % rows);
    work.N_idx = int(r / rows) * kClusterN + work.N_idx % kClusterN;
    work.M_idx = wait_.cluster_order[entry] * kClusterM + work.M_idx % kClusterM;
    if (cutlass::canonical_warp_group_idx() == 0) wait_for_rows(work.M_idx);
    return work;
  }

  // Lane 0 of each producer warp polls; the warp then orders the TMA (async proxy) loads after
  // what the acquire made visible.
  CUTLASS_DEVICE void wait_for_rows(int m_tile) const {
    if (m_tile < wait_.m_tiles && threadIdx.x % 32 == 0) {
      const int first = wait_.tile_chunks[2 * m_tile], end = wait_.tile_chunks[2 * m_tile + 1];
      const uint64_t start = cuda_comm::global_timer_ns();
      for (int c = first; c < end; ++c) {
        uint32_t pause_ns = 32;
        uint64_t observed;
        while ((observed = cuda_comm::load_acquire_system(wait_.words + c)) < wait_.expected) {
          const uint64_t waited = cuda_comm::global_timer_ns() - start;
          if (waited > wait_.timeout_ns) {
            // Who waited for whom goes to the host-mapped record, which the host reports
            // (WaitTimeoutLog); no printf: a call anywhere in this kernel makes ptxas serialize
            // the consumers' WGMMAs (its C7510 warning).
            cuda_comm::record_wait_timeout(wait_.record, wait_.claim, wait_.rank, c,
                                           wait_.chunk_source[c], int(WaitCmp::kGe), 0,
                                           wait_.expected, observed, waited);
            __trap();
          }
          __nanosleep(pause_ns);
          if (pause_ns < 256) pause_ns *= 2;
        }
      }
    }
    __syncwarp();
    asm volatile("fence.proxy.async.global;" ::: "memory");
  }

  ArrivalWait wait_;
};

}  // namespace tessera::tp::kernels

namespace cutlass::gemm::kernel::detail {

template <class TileShape, class ClusterShape, uint32_t kStages>
struct TileSchedulerSelector<tessera::tp::kernels::ArrivalScheduler, arch::Sm90, TileShape,
                             ClusterShape, kStages> {
  using Scheduler = tessera::tp::kernels::ArrivalTileScheduler<int(cute::size<0>(ClusterShape{})),
                                                              int(cute::size<1>(ClusterShape{}))>;
};

}  // namespace cutlass::gemm::kernel::detail
