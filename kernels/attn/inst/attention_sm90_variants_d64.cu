// Tuning variants of the sm90 attention kernel for bf16, head dim 64, registered under names
// that the TESSERA_ATTN_KERNEL parameter selects (scripts/attn_dev.sh times them; a variant
// named "cand" also goes through the GPU tests there: register the next candidate under it).
// Compiled to nothing unless TESSERA_ATTN_DEV_VARIANTS is defined, so library and CI builds
// pay nothing.
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
// <kBlockN, kStages, consumer warp groups>
template <int kBlockN, int kStages, int kWarpGroups>
bool add(const char* name) {
  using Traits = sm90::AttentionTraits<cutlass::bfloat16_t, 64, kBlockN, kStages, kWarpGroups>;
  return register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<Traits>, name);
}
const bool kRegistered = add<192, 2, 2>("n192") && add<96, 2, 3>("wg3n96") &&
                         add<128, 2, 3>("wg3n128") && add<224, 2, 2>("n224") &&
                         add<128, 2, 2>("n128");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
