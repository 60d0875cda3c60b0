// Explicit instantiation of the sm90 GEMM building block: f16 in and out, weight [N, K];
// registers its launcher at load time (TESSERA_KERNEL_FILTER/EXCLUDE may leave this file out).
#include "gemm/gemm_sm90.cuh"

namespace tessera::gemm::kernels {
namespace {
using Traits = sm90::GemmTraits<cutlass::half_t, cutlass::half_t, true>;
const bool kRegistered = register_gemm_kernel({ElementType::kF16, ElementType::kF16, true},
                                              &sm90::launch_gemm<Traits>);
}  // namespace
}  // namespace tessera::gemm::kernels
