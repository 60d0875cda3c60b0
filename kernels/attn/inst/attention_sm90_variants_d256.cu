// Tuning variants of the sm90 attention kernel for bf16, head dim 256 (see the d128 file): the
// key block beside production's 80 (the O accumulator leaves little room for S and P).
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
template <int kBlockN>
bool add(const char* name) {
  using Traits = sm90::AttentionTraits<cutlass::bfloat16_t, 256, kBlockN>;
  return register_attention_kernel(ElementType::kBF16, 256, &sm90::launch_attention<Traits>, name);
}
const bool kRegistered = add<64>("n64") && add<96>("n96");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
