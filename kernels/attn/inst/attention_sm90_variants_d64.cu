// Tuning variants of the sm90 attention kernel for head dim 64 (see the d128 file).
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
// "fresh": production's bf16 configuration with Q's descriptors rebuilt every block (run 6:
// 1% slower; kept to re-measure beside the next D64 change).
using Fresh = sm90::AttentionTraits<cutlass::bfloat16_t, 64, 112, 2, 3, true>;
const bool kRegistered =
    register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<Fresh>, "fresh");
// "pingpong": production's bf16 configuration (three consumer groups) with ping-pong turns
// (run 10: +0.6%).
using PingPong = sm90::AttentionTraits<cutlass::bfloat16_t, 64, 112, 2, 3, false, true>;
const bool kCand =
    register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<PingPong>,
                              "pingpong");
// "polyN": N of every 8 column groups' exponentials from poly_exp2 (FMA pipe).
using Poly1 = sm90::AttentionTraits<cutlass::bfloat16_t, 64, 112, 2, 3, false, false, 1>;
const bool kPoly1 =
    register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<Poly1>, "poly1");
using Poly2 = sm90::AttentionTraits<cutlass::bfloat16_t, 64, 112, 2, 3, false, false, 2>;
const bool kPoly2 =
    register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<Poly2>, "poly2");
using Poly3 = sm90::AttentionTraits<cutlass::bfloat16_t, 64, 112, 2, 3, false, false, 3>;
const bool kPoly3 =
    register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<Poly3>, "poly3");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
