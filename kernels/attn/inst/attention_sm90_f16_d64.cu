// Explicit instantiation of the sm90 attention kernel for fp16 inputs, head dim 64; registers
// its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out of a build).
// Configuration: 2 consumer warp groups, kBlockN 192 (the fp16 configuration validated on
// the GPU); measured in docs/attention-kernels.md.
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::half_t, 64, 192>;
const bool kRegistered =
    register_attention_kernel(ElementType::kF16, 64, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
