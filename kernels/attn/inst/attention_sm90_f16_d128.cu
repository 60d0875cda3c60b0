// Explicit instantiation of the sm90 attention kernel for fp16 inputs, head dim 128; registers
// its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out of a build).
// Configuration: kBlockN 176 (S tile 128 x 176), bf16's: 591 against 587 TFLOP/s for kBlockN
// 128 at L 16k (docs/attention-kernels.md, run 5).
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::half_t, 128, 176>;
const bool kRegistered =
    register_attention_kernel(ElementType::kF16, 128, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
