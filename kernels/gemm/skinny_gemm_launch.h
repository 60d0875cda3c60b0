// The skinny GEMM (decode's projections: a few rows of activations against a Linear's weight):
//   d[M, N] = a[M, K] . b[N, K]^T + bias[N]     M <= kSkinnyMaxM, b row-major [N, K]
// bf16 or fp16 in, fp32 accumulation, out of the input's type or fp32. Memory-bound: every
// weight element is read once, as 16-byte streaming loads that skip L1 (which keeps `a`);
// a CTA takes four weight rows, its threads stride over K, and a fixed tree (shuffles within a
// warp, then the warps in order) sums them, so results are bitwise the same from run to run. Plain C++ so host glue and kernels share it.
#pragma once

#include <cstdint>

#include "gemm/gemm_launch.h"

namespace tessera::gemm::kernels {

inline constexpr int64_t kSkinnyMaxM = 8;

struct SkinnyGemmParams {
  ElementType in = ElementType::kBF16;
  ElementType out = ElementType::kBF16;
  int64_t m = 0, n = 0, k = 0;  // k a multiple of 8, every pointer 16-byte aligned
  const void* a = nullptr;      // [M, K]
  const void* b = nullptr;      // [N, K]
  const void* bias = nullptr;   // [N] of the output's type, or nullptr
  void* d = nullptr;            // [M, N]
};

// Whether the kernel takes the problem (16-bit in, any out type, M <= kSkinnyMaxM, K % 8 == 0).
bool skinny_gemm_supported(ElementType in, int64_t m, int64_t k);
// No allocation or synchronization (CUDA-graph capturable).
void launch_skinny_gemm(const SkinnyGemmParams& p, void* cuda_stream);

}  // namespace tessera::gemm::kernels
