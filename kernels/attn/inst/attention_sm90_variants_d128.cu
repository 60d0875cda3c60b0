// Tuning variants of the sm90 attention kernel for bf16, head dim 128, registered under names
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
  using Traits = sm90::AttentionTraits<cutlass::bfloat16_t, 128, kBlockN, kStages, kWarpGroups>;
  return register_attention_kernel(ElementType::kBF16, 128, &sm90::launch_attention<Traits>, name);
}
const bool kRegistered = add<128, 2, 2>("n128") && add<128, 3, 2>("s3");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
