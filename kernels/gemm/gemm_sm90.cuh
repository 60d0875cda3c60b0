// The Hopper GEMM building block: CUTLASS 4.x collectives for sm90a (TMA loads into a
// multistage shared-memory pipeline, WGMMA, a warp-specialized cooperative persistent kernel:
// one producer warp group, two consumer warp groups on a 128 x 256 tile, clusters of 2 along M
// sharing B by TMA multicast), and an epilogue that adds a per-column bias (d = acc + bias[n])
// and stores through TMA.
//   a [M, K] row-major (K-major); b [N, K] row-major = K-major B (weight_nk), or [K, N]
//   row-major = N-major B (transposed by the TMA/WGMMA path for 16-bit types); d [M, N].
// Tensor-parallel hooks (tile order, a prologue signal wait, stores to a peer with a signal)
// are still to come; this is the plain GEMM they will extend, measured against cuBLASLt.
#pragma once

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <type_traits>

#include "gemm/gemm_launch.h"

namespace tessera::gemm::kernels::sm90 {

template <class ElementIn_, class ElementOut_, bool kWeightNK_>
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
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  static_assert(sizeof(ElementIn) == 2, "the building block takes bf16 or f16 operands");

  using Fusion = cutlass::epilogue::fusion::LinCombPerColBias<ElementOut, float, ElementOut,
                                                              ElementOut, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignOut,
      ElementOut, LayoutD, kAlignOut, cutlass::epilogue::TmaWarpSpecializedCooperative,
      Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, LayoutA, kAlignIn,
      ElementIn, LayoutB, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                      Epilogue, cutlass::gemm::PersistentScheduler>;
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
cudaError_t launch_gemm(const GemmProblem& p, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  using Gemm = typename Traits::Gemm;
  using ElementIn = typename Traits::ElementIn;
  using ElementOut = typename Traits::ElementOut;
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {int(p.m), int(p.n), int(p.k), 1},
      {static_cast<const ElementIn*>(p.a), packed_stride<StrideA>(p.m, p.k),
       static_cast<const ElementIn*>(p.b), packed_stride<StrideB>(p.n, p.k)},
      {{}, nullptr, packed_stride<StrideC>(p.m, p.n), static_cast<ElementOut*>(p.d),
       packed_stride<StrideD>(p.m, p.n)}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.thread.bias_ptr = static_cast<const ElementOut*>(p.bias);
  args.hw_info.sm_count = p.device_sms;
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  if (Gemm::get_workspace_size(args) > workspace_bytes) return cudaErrorInvalidValue;
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) {
    return cudaErrorInvalidValue;
  }
  if (gemm.run(stream) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
  return cudaGetLastError();
}

}  // namespace tessera::gemm::kernels::sm90
