// Explicit instantiation of the sm90 attention kernel for bf16 inputs, head dim 64; registers
// its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out of a build).
// Configuration: 3 consumer warp groups (192 query rows), kBlockN 112; measured in
// docs/attention-kernels.md.
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::bfloat16_t, 64, 112, 2, 3>;
const bool kRegistered =
    register_attention_kernel(ElementType::kBF16, 64, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
