// The Hopper GEMM building block: CUTLASS 4.x collectives for sm90a (TMA loads into a
// multistage shared-memory pipeline, WGMMA, a warp-specialized persistent kernel: one producer
// warp group and two consumer warp groups, which share one CTA tile (cooperative,
// on a stream-K tile scheduler: data-parallel, stream-K or split-K chosen per launch, partial
// sums reduced in a fixed order) or take turns on two (ping-pong: one's epilogue runs under the
// other's mainloop); clusters of two CTAs share an operand by TMA multicast), and an epilogue that
// adds a per-column bias (d = acc + bias[n]) and stores through TMA.
//   a [M, K] row-major (K-major); b [N, K] row-major = K-major B (weight_nk), or [K, N]
//   row-major = N-major B (transposed by the TMA/WGMMA path for 16-bit types); d [M, N].
// The tensor-parallel kernels (kernels/tp/) reuse these traits with a tile scheduler of their
// own (SchedulerTag_), which carries the tile-order and arrival-wait hooks.
#pragma once

#include <cuda_runtime.h>

#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <atomic>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <string_view>
#include <type_traits>

#include "gemm/gemm_launch.h"

namespace tessera::gemm::kernels::sm90 {

// Cooperative tiles (two consumer warp groups share a tile) run on the stream-K scheduler;
// ping-pong tiles (each consumer warp group owns a tile, one's epilogue under the other's
// mainloop) on the persistent data-parallel one, the only one CUTLASS allows them.
struct Cooperative {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using Scheduler = cutlass::gemm::StreamKScheduler;
};
struct PingPong {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using Scheduler = cutlass::gemm::PersistentScheduler;
};

template <GemmTile kTile>
struct TileTraits;
template <>
struct TileTraits<GemmTile::k128x256> {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Schedule = Cooperative;
};
template <>
struct TileTraits<GemmTile::k128x128> {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using Schedule = Cooperative;
};
template <>
struct TileTraits<GemmTile::k128x64> {
  using TileShape = cute::Shape<cute::_128, cute::_64, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using Schedule = Cooperative;
};
template <>
struct TileTraits<GemmTile::k128x96> {
  using TileShape = cute::Shape<cute::_128, cute::_96, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  using Schedule = Cooperative;
};
template <>
struct TileTraits<GemmTile::k64x256PingPong> {
  using TileShape = cute::Shape<cute::_64, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Schedule = PingPong;
};
template <>
struct TileTraits<GemmTile::k128x128PingPong> {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Schedule = PingPong;
};

// How a tile is built: production's cluster, schedule and bias epilogue; tuning variants
// (inst/gemm_sm90_variants.cu) replace parts of it.
template <GemmTile kTile>
struct ProductionBuild {
  using ClusterShape = typename TileTraits<kTile>::ClusterShape;
  using Schedule = typename TileTraits<kTile>::Schedule;
  static constexpr bool kBias = true;  // false: no bias epilogue (a problem with a bias refused)
};

// SchedulerTag_: void for the tile's own scheduler; the tensor-parallel kernels pass theirs
// (kernels/tp/), which carries their hooks.
template <class ElementIn_, class ElementOut_, bool kWeightNK_, GemmTile kTile_,
          class SchedulerTag_ = void, class Build_ = ProductionBuild<kTile_>>
struct GemmTraits {
  using ElementIn = ElementIn_;
  using ElementOut = ElementOut_;
  static constexpr bool kWeightNK = kWeightNK_;
  using LayoutA = cutlass::layout::RowMajor;
  // CUTLASS names B's layout as K x N: [N, K] row-major is column-major K x N.
  using LayoutB =
      std::conditional_t<kWeightNK, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignIn = 16 / int(sizeof(ElementIn));
  static constexpr int kAlignOut = 16 / int(sizeof(ElementOut));
  static constexpr GemmTile kTile = kTile_;
  using TileShape = typename TileTraits<kTile>::TileShape;
  using ClusterShape = typename Build_::ClusterShape;
  using Schedule = typename Build_::Schedule;
  static constexpr bool kBias = Build_::kBias;
  using SchedulerTag = std::conditional_t<std::is_void_v<SchedulerTag_>,
                                          typename Schedule::Scheduler, SchedulerTag_>;
  static constexpr bool kStreamK = std::is_same_v<SchedulerTag, cutlass::gemm::StreamKScheduler>;
  static_assert(sizeof(ElementIn) == 2, "the building block takes bf16 or f16 operands");

  using Fusion = std::conditional_t<
      kBias,
      cutlass::epilogue::fusion::LinCombPerColBias<ElementOut, float, ElementOut, ElementOut,
                                                   float>,
      cutlass::epilogue::fusion::LinearCombination<ElementOut, float, ElementOut, float>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignOut,
      ElementOut, LayoutD, kAlignOut, typename Schedule::Epilogue, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, LayoutA, kAlignIn, ElementIn,
      LayoutB, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Kernel>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                      Epilogue, SchedulerTag>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// A packed stride of a 2-D operand (batch 1): the contiguous mode's stride stays the static 1,
// the other is the contiguous extent.
template <class Stride>
Stride packed_stride(int64_t extent0, int64_t extent1) {
  Stride s{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(cute::get<1>(s))>>::value) {
    cute::get<0>(s) = extent1;  // mode 1 contiguous
  } else {
    cute::get<1>(s) = extent0;  // mode 0 contiguous
  }
  cute::get<2>(s) = extent0 * extent1;
  return s;
}

template <class Traits>
typename Traits::Gemm::Arguments gemm_arguments(const GemmProblem& p, const GemmConfig& config) {
  using Gemm = typename Traits::Gemm;
  using Kernel = typename Gemm::GemmKernel;
  using ElementIn = typename Traits::ElementIn;
  using ElementOut = typename Traits::ElementOut;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {int(p.m), int(p.n), int(p.k), 1},
      {static_cast<const ElementIn*>(p.a), packed_stride<typename Kernel::StrideA>(p.m, p.k),
       static_cast<const ElementIn*>(p.b), packed_stride<typename Kernel::StrideB>(p.n, p.k)},
      {{},
       nullptr,
       packed_stride<typename Kernel::StrideC>(p.m, p.n),
       static_cast<ElementOut*>(p.d),
       packed_stride<typename Kernel::StrideD>(p.m, p.n)}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  if constexpr (Traits::kBias)
    args.epilogue.thread.bias_ptr = static_cast<const ElementOut*>(p.bias);
  args.hw_info.sm_count = p.device_sms;
  auto& sched = args.scheduler;
  sched.max_swizzle_size = config.swizzle;
  if constexpr (Traits::kStreamK) {
    using Mode = typename Kernel::TileScheduler::DecompositionMode;
    switch (config.split) {
      case GemmSplit::kDataParallel:
        sched.decomposition_mode = Mode::DataParallel;
        break;
      case GemmSplit::kStreamK:
        sched.decomposition_mode = Mode::StreamK;
        break;
      case GemmSplit::kSplitK:
        sched.decomposition_mode = Mode::SplitK;
        sched.splits = config.splits;
        break;
    }
  }
  return args;
}

template <class Traits>
size_t gemm_workspace_bytes(const GemmProblem& p, const GemmConfig& config) {
  return Traits::Gemm::get_workspace_size(gemm_arguments<Traits>(p, config));
}

// Launches with prepared arguments (gemm_arguments, plus what a scheduler of the tensor-parallel
// kernels adds).
template <class Traits>
cudaError_t launch_with_arguments(const typename Traits::Gemm::Arguments& args, void* workspace,
                                  size_t workspace_bytes, cudaStream_t stream) {
  using Gemm = typename Traits::Gemm;
  using Kernel = typename Gemm::GemmKernel;
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  if (Gemm::get_workspace_size(args) > workspace_bytes) return cudaErrorInvalidValue;
  // The shared-memory opt-in, once per device (a host call each launch would show at small M).
  static std::atomic<uint64_t> smem_set_on{0};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return cudaErrorInvalidDevice;
  if (!(smem_set_on.load(std::memory_order_acquire) & (uint64_t(1) << device))) {
    const cudaError_t e = cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               Kernel::SharedStorageSize);
    if (e != cudaSuccess) return e;
    smem_set_on.fetch_or(uint64_t(1) << device, std::memory_order_acq_rel);
  }
  // Stream-K and split-K clear their reduction flags here (an async memset on `stream`).
  if (Kernel::initialize_workspace(args, workspace, stream) != cutlass::Status::kSuccess) {
    return cudaErrorInvalidValue;
  }
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);
  if (Gemm::run(params, stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
  return cudaGetLastError();
}

template <class Traits>
cudaError_t launch_gemm(const GemmProblem& p, const GemmConfig& config, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  // Only the stream-K scheduler splits; the others run whole tiles.
  if (!Traits::kStreamK && config.split != GemmSplit::kDataParallel) return cudaErrorInvalidValue;
  if (!Traits::kBias && p.bias != nullptr) return cudaErrorInvalidValue;
  return launch_with_arguments<Traits>(gemm_arguments<Traits>(p, config), workspace,
                                       workspace_bytes, stream);
}

// Registers the launcher of one instantiation (called from inst/ at load time); `variant` names
// a tuning variant (GemmKey::variant).
template <class Traits>
bool register_traits(ElementType in, ElementType out, std::string_view variant = {}) {
  return register_gemm_kernel({in, out, Traits::kWeightNK, Traits::kTile, variant},
                              {&launch_gemm<Traits>, &gemm_workspace_bytes<Traits>});
}

}  // namespace tessera::gemm::kernels::sm90
