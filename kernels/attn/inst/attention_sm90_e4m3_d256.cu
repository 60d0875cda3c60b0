// Explicit instantiation of the sm90 attention kernel for FP8 (e4m3) inputs, head dim 256 (bf16
// output); registers its launcher at load time (TESSERA_KERNEL_FILTER may leave this file out).
// Configuration: kBlockN 128 (V^T's rows are 128-byte panels of keys).
#include "attn/attention_sm90.cuh"

namespace tessera::attn::kernels {
namespace {
using Traits = sm90::AttentionTraits<cutlass::float_e4m3_t, 256, 128>;
const bool kRegistered =
    register_attention_kernel(ElementType::kE4M3, 256, &sm90::launch_attention<Traits>);
}  // namespace
}  // namespace tessera::attn::kernels
