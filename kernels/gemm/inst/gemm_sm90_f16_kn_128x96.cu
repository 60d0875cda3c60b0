// Explicit instantiation of the sm90 GEMM building block: f16 in and out, weight [K, N], CTA tile
// 128x96; registers its launcher at load time (TESSERA_KERNEL_FILTER/EXCLUDE may leave this
// file out).
#include "gemm/gemm_sm90.cuh"

namespace tessera::gemm::kernels {
namespace {
const bool kRegistered = sm90::register_traits<
    sm90::GemmTraits<cutlass::half_t, cutlass::half_t, false, GemmTile::k128x96>>(
    ElementType::kF16, ElementType::kF16);
}  // namespace
}  // namespace tessera::gemm::kernels
