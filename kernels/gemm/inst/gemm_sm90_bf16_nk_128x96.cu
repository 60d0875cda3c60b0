// Explicit instantiation of the sm90 GEMM building block: bf16 in and out, weight [N, K], CTA tile
// 128x96; registers its launcher at load time (TESSERA_KERNEL_FILTER/EXCLUDE may leave this
// file out).
#include "gemm/gemm_sm90.cuh"

namespace tessera::gemm::kernels {
namespace {
const bool kRegistered = sm90::register_traits<
    sm90::GemmTraits<cutlass::bfloat16_t, cutlass::bfloat16_t, true, GemmTile::k128x96>>(
    ElementType::kBF16, ElementType::kBF16);
}  // namespace
}  // namespace tessera::gemm::kernels
