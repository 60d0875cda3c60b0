// Explicit instantiation of the AllGather+GEMM kernel: f16, weight [N, K], CTA tile 128x256;
// registers its launcher at load time (TESSERA_KERNEL_FILTER/EXCLUDE may leave it out).
#include "tp/ag_gemm_sm90.cuh"

namespace tessera::tp::kernels {
namespace {
const bool kRegistered =
    sm90::register_ag_traits<sm90::AgGemmTraits<cutlass::half_t, true, gemm::GemmTile::k128x256>>(
        gemm::kernels::ElementType::kF16);
}  // namespace
}  // namespace tessera::tp::kernels
