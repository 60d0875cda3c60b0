// Tuning variants of the sm90 FP8 (e4m3) attention kernel for head dim 128, registered under
// names that TESSERA_ATTN_KERNEL selects (scripts/attn_dev.sh times them). Compiled to nothing
// unless TESSERA_ATTN_DEV_VARIANTS is defined.
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using E4m3 = cutlass::float_e4m3_t;
// "pingpong": production's tile with the consumer groups taking turns at the GEMMs (run 10:
// -7%).
using PingPong = sm90::AttentionTraits<E4m3, 128, 128, 2, 2, true, true>;
const bool kPingPong = register_attention_kernel(ElementType::kE4M3, 128,
                                                 &sm90::launch_attention<PingPong>, "pingpong");
// kBlockN 256 spilled 172 bytes and ran 18% slower; a third stage changed nothing (run 9);
// exponentials two at a time in f16 (ex2.approx.f16x2) ran 29% slower: ptxas emits two scalar
// MUFU.EX2.F16 a pair plus the packing (run 12).
// "hoisted": Q's descriptors left to ptxas (FP8 Q has 4 K steps at D128, not bf16's 8).
using Hoisted = sm90::AttentionTraits<E4m3, 128, 128, 2, 2, false>;
const bool kHoisted = register_attention_kernel(ElementType::kE4M3, 128,
                                                &sm90::launch_attention<Hoisted>, "hoisted");
// "wg3": three consumer groups (192 query rows a CTA): a third warp a scheduler to interleave.
using ThreeGroups = sm90::AttentionTraits<E4m3, 128, 128, 2, 3>;
const bool kThreeGroups = register_attention_kernel(ElementType::kE4M3, 128,
                                                    &sm90::launch_attention<ThreeGroups>, "wg3");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
