// Element access for the layer-operation kernels: float32 arithmetic on f32, bf16 and fp16
// storage, index vectors of i32 or i64, a block-wide sum, and the grid size of grid-stride
// loops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>

#include "ops/ops_launch.h"

namespace tessera::model::kernels {

__device__ inline float to_f32(float v) {
  return v;
}
__device__ inline float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ inline float to_f32(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ inline T from_f32(float v);
template <>
__device__ inline float from_f32<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

__device__ inline int64_t load_index(const void* data, IndexType type, int64_t i) {
  return type == IndexType::kI64 ? static_cast<const int64_t*>(data)[i]
                                 : int64_t{static_cast<const int32_t*>(data)[i]};
}

inline constexpr int kBlockThreads = 256;

// Eight 2-byte elements through one 16-byte access (the caller checks the alignment).
template <typename T>
__device__ inline void load8(const T* src, float (&f)[8]) {
  static_assert(sizeof(T) == 2);
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f32(e[i]);
}
template <typename T>
__device__ inline void store8(T* dst, const float (&f)[8]) {
  static_assert(sizeof(T) == 2);
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = from_f32<T>(f[i]);
  *reinterpret_cast<uint4*>(dst) = raw;
}

// Whether 16-byte accesses of eight 2-byte elements reach every row of `data` with `strides`
// (in elements) from its start.
inline bool vec8_aligned(const void* data, std::initializer_list<int64_t> strides) {
  if (data == nullptr) return true;
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return false;
  for (int64_t s : strides)
    if (s % 8 != 0) return false;
  return true;
}

// The sum of `v` over the block (kBlockThreads threads); every thread gets it. `scratch` holds
// kBlockThreads / 32 floats; the call may be repeated with the same scratch.
__device__ inline float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  __syncthreads();  // a previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kBlockThreads / 32; ++w) total += scratch[w];  // same order everywhere
  return total;
}

// Blocks for a grid-stride loop over `work` items of `per_block` each.
inline unsigned grid_blocks(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return unsigned(blocks < (int64_t{1} << 20) ? (blocks > 0 ? blocks : 1) : (int64_t{1} << 20));
}

}  // namespace tessera::model::kernels
