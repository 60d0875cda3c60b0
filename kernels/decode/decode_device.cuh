// Device helpers the decode kernels share (decode_sm90.cuh for grouped attention, mla_sm90.cuh
// and mla_unfused_kernels.cu for MLA): the softmax partials' rescale, a warp sum, 16-byte loads
// widened to float, and a cache row's address with the page-table check.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cluster/cluster_collectives.cuh"

namespace tessera::decode::kernels {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kNoKey = -__builtin_huge_valf();  // the maximum of a partial with no key

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

// The sum of v over the warp's lanes, on every lane.
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Row of token t of sequence `seq` in a cache of the layout P's fields describe (page_table,
// pages_per_seq, num_pages, page_size for a paged cache; context_stride for a contiguous one),
// the page index checked. Positions fit in 32 bits, and a power-of-two page size (the usual
// 16) needs no division.
template <typename P>
__device__ inline int64_t cache_row_of(const P& p, int seq, int64_t t) {
  if (p.page_table == nullptr) return int64_t(seq) * p.context_stride + t;
  const int pos = int(t), page_size = int(p.page_size);
  const bool pow2 = (page_size & (page_size - 1)) == 0;
  const int slot = pow2 ? pos >> (__ffs(page_size) - 1) : pos / page_size;
  const int32_t page = p.page_table[int64_t(seq) * p.pages_per_seq + slot];
  if (page < 0 || page >= p.num_pages) bad_page(seq, slot, page, p.num_pages);
  return int64_t(page) * page_size + (pow2 ? pos & (page_size - 1) : pos % page_size);
}

}  // namespace tessera::decode::kernels
