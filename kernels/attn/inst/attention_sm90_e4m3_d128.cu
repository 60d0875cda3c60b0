// Explicit instantiation of the sm90 attention kernel for FP8 (e4m3) inputs, head dim 128 (bf16
// output); registers its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out).
// Configuration: kBlockN 128 (S tile 128 x 128); measured in docs/attention-kernels.md.
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::float_e4m3_t, 128, 128>;
const bool kRegistered =
    register_attention_kernel(ElementType::kE4M3, 128, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
