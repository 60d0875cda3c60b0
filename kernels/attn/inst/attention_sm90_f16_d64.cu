// Explicit instantiation of the sm90 attention kernel for fp16 inputs, head dim 64; registers
// its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out of a build).
// Configuration: bf16's, three consumer warp groups with kBlockN 112: 469 against 440 TFLOP/s
// for two groups with kBlockN 192 at L 64k (docs/attention-kernels.md, run 5).
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::half_t, 64, 112, 2, 3>;
const bool kRegistered =
    register_attention_kernel(ElementType::kF16, 64, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
