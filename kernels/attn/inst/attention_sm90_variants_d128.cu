// Tuning variants of the sm90 attention kernel for head dim 128, registered under names that
// the TESSERA_ATTN_KERNEL parameter selects (scripts/attn_dev.sh times them; a variant named
// "cand" also goes through the GPU tests there: register the next candidate under it).
// Compiled to nothing unless TESSERA_ATTN_DEV_VARIANTS is defined, so library and CI builds
// pay nothing.
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
// "hoisted": production's bf16 configuration with Q's descriptors left to ptxas (the form
// before run 6).
using Hoisted = sm90::AttentionTraits<cutlass::bfloat16_t, 128, 176, 2, 2, false>;
const bool kRegistered = register_attention_kernel(
    ElementType::kBF16, 128, &sm90::launch_attention<Hoisted>, "hoisted");
// "pingpong": production's bf16 configuration with ping-pong turns (run 10: +0-1%).
using PingPong = sm90::AttentionTraits<cutlass::bfloat16_t, 128, 176, 2, 2, true, true>;
const bool kCand = register_attention_kernel(ElementType::kBF16, 128,
                                             &sm90::launch_attention<PingPong>, "pingpong");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
