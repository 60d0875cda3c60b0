// Tuning variants of the sm90 attention kernel for head dim 64 (see the d128 file).
#ifdef TESSERA_ATTN_DEV_VARIANTS
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
// "cand": fp16 on bf16's configuration (three consumer warp groups, kBlockN 112), in place of
// fp16's two warp groups with kBlockN 192.
using Cand = sm90::AttentionTraits<cutlass::half_t, 64, 112, 2, 3>;
const bool kRegistered =
    register_attention_kernel(ElementType::kF16, 64, &sm90::launch_attention<Cand>, "cand");
}  // namespace
}  // namespace tessera::attn::kernels
#endif
