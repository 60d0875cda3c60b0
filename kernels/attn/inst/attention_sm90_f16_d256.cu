// Explicit instantiation of the sm90 attention kernel for f16 inputs, head dim 256; registers
// its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out of a build).
// Configuration: kBlockN 80 (S tile 128 x 80): the 64 x 256 O accumulator takes 128 registers
// a consumer thread, and Q (64 KiB) plus two stages of K and V (160 KiB) fill shared memory.
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::half_t, 256, 80>;
const bool kRegistered =
    register_attention_kernel(ElementType::kF16, 256, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
