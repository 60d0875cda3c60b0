// Tuning variants of the sm90 GEMM building block's 128x64 tile (bf16, weight [N, K]), the tile
// whose fixed cost at one row tile docs/PERF.md measured against cuBLASLt's (2026-12-06),
// registered under names that the TESSERA_GEMM_KERNEL parameter selects. Compiled to nothing
// unless TESSERA_GEMM_DEV_VARIANTS is defined, so library and CI builds pay nothing:
//   cmake ... -DCMAKE_CUDA_FLAGS=-DTESSERA_GEMM_DEV_VARIANTS
//   TESSERA_GEMM_KERNEL=nobias tessera bench gemm --model llama3-70b --tp 8 --m 128 --configs
//   128x64/dp/s1
// (each variant a run of its own beside production's; variants run data-parallel only where
// their scheduler says so, and "nobias" refuses a problem with a bias).
#ifdef TESSERA_GEMM_DEV_VARIANTS
#include "gemm/gemm_sm90.cuh"

namespace tessera::gemm::kernels {
namespace {

using Production = sm90::ProductionBuild<GemmTile::k128x64>;

// "persistent": CUTLASS's data-parallel persistent scheduler in place of the stream-K one.
struct PersistentBuild : Production {
  struct Schedule : sm90::Cooperative {
    using Scheduler = cutlass::gemm::PersistentScheduler;
  };
};
// "nobias": the plain linear-combination epilogue, no bias broadcast.
struct NoBiasBuild : Production {
  static constexpr bool kBias = false;
};
// "cluster1": no clusters (no A multicast, no pairing of CTAs).
struct ClusterOneBuild : Production {
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
};

template <class Build>
using Variant = sm90::GemmTraits<cutlass::bfloat16_t, cutlass::bfloat16_t, true, GemmTile::k128x64,
                                 void, Build>;

const bool kPersistent = sm90::register_traits<Variant<PersistentBuild>>(
    ElementType::kBF16, ElementType::kBF16, "persistent");
const bool kNoBias =
    sm90::register_traits<Variant<NoBiasBuild>>(ElementType::kBF16, ElementType::kBF16, "nobias");
const bool kClusterOne = sm90::register_traits<Variant<ClusterOneBuild>>(
    ElementType::kBF16, ElementType::kBF16, "cluster1");

}  // namespace
}  // namespace tessera::gemm::kernels
#endif
