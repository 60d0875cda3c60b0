// Tuning variants of the sm90 attention kernel for bf16, head dim 64, registered under names
// that the TESSERA_ATTN_KERNEL parameter selects (scripts/attn_dev.sh times them). Compiled to
// nothing unless TESSERA_ATTN_DEV_VARIANTS is defined, so library and CI builds pay nothing.
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
// <kBlockN, kStages, warp-group turns>
template <int kBlockN, int kStages, bool kTurns>
bool add(const char* name) {
  using Traits = sm90::AttentionTraits<cutlass::bfloat16_t, 64, kBlockN, kStages, kTurns>;
  return register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<Traits>, name);
}
const bool kRegistered =
    add<128, 2, false>("n128") && add<192, 3, false>("n192s3") && add<224, 2, false>("n224") &&
    add<192, 2, true>("n192turns");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
