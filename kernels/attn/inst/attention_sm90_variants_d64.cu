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
}  // namespace
}  // namespace tessera::attn::kernels
#endif
