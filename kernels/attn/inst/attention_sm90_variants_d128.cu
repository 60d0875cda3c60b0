// Tuning variants of the sm90 attention kernel for bf16, head dim 128, registered under names
// that the TESSERA_ATTN_KERNEL parameter selects (scripts/attn_dev.sh times them). Compiled to
// nothing unless TESSERA_ATTN_DEV_VARIANTS is defined, so library and CI builds pay nothing.
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
// <kBlockN, kStages, warp-group turns>
template <int kBlockN, int kStages, bool kTurns>
bool add(const char* name) {
  using Traits = sm90::AttentionTraits<cutlass::bfloat16_t, 128, kBlockN, kStages, kTurns>;
  return register_attention_kernel(ElementType::kBF16, 128, &sm90::launch_attention<Traits>, name);
}
const bool kRegistered =
    add<128, 3, false>("s3") && add<176, 2, false>("n176") && add<128, 2, true>("turns");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
