// Tuning variants of the sm90 attention kernel for bf16, head dim 256 (see the d128 file).
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
// "hoisted": Q's descriptors left to ptxas (hoisted out of the loop, 132 bytes of spills), the
// form before they were rebuilt every block.
using Hoisted = sm90::AttentionTraits<cutlass::bfloat16_t, 256, 80, 2, 2, false>;
const bool kRegistered = register_attention_kernel(
    ElementType::kBF16, 256, &sm90::launch_attention<Hoisted>, "hoisted");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
