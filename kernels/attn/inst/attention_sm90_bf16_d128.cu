// Explicit instantiation of the sm90 attention kernel for bf16 inputs, head dim 128; registers
// its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out of a build).
// Configuration: kBlockN 176 (S tile 128 x 176); measured in docs/attention-kernels.md.
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::bfloat16_t, 128, 176>;
const bool kRegistered =
    register_attention_kernel(ElementType::kBF16, 128, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
