// Tuning variants of the sm90 GEMM building block's 128x64 tile (bf16, weight [N, K]), the tile
// whose fixed cost at one row tile docs/PERF.md measured against cuBLASLt's (2026-12-06),
// registered under names that the TESSERA_GEMM_KERNEL parameter selects. Compiled to nothing
// unless TESSERA_GEMM_DEV_VARIANTS is defined, so library and CI builds pay nothing;
// scripts/gemm_dev.sh builds them and times each (a run of its own, TESSERA_GEMM_KERNEL=NAME)
// beside production and cuBLASLt. "persistent" runs whole tiles only (its scheduler does not
// split), and "nobias" refuses a problem with a bias.
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
