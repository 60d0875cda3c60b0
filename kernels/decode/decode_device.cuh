// Device helpers both fused decode kernels use (decode_sm90.cuh for grouped attention,
// mla_sm90.cuh for MLA): the softmax partials' rescale, 16-byte loads widened to float, and the
// page-table check's report.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cluster/cluster_collectives.cuh"

namespace tessera::decode::kernels {

// exp2(m - m_max), the factor that rescales a softmax partial with maximum m to m_max; a
// partial that saw no key (m = -inf) contributes nothing, also when m_max is -inf too.
__device__ inline float rescale(float m, float m_max) {
  return m == -__builtin_huge_valf() ? 0.f : exp2f(m - m_max);
}

// Eight elements of T (one 16-byte load) as floats.
template <typename T>
__device__ inline void to_float8(const uint4& raw, float (&f)[8]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = tessera::cluster::to_f32(e[i]);
}

// A page index outside the cache: reported with where it was read, then the kernel traps (the
// host sees a launch failure). Out of line, so the checks on the hot paths cost no registers.
static __device__ __noinline__ void bad_page(int seq, int64_t index, int32_t page, int64_t num_pages) {
  printf("tessera decode kernel: page_table[%d][%lld] = %d is outside [0, %lld) (block %d)\n", seq,
         static_cast<long long>(index), page, static_cast<long long>(num_pages),
         static_cast<int>(blockIdx.x));
  __trap();
}

}  // namespace tessera::decode::kernels
