// Split-KV decode attention on tensor cores: launch_split_kv_attention's kernel for 16-bit
// caches at head dimensions 64 and 128 (unfused_kernels.cu keeps the CUDA-core kernel for 256).
//
// CTA (split, kv_head, b) takes the split's tokens of [0, positions[b]] for the G <= 16 query
// heads of one KV head, which are the columns of m16n8k16 MMAs (kN tiles of 8 heads): each key
// and value row is read once for the group, and a warp's work for 16 tokens is a few dozen MMAs
// and ldmatrix loads. The CUDA-core kernel spent most of its time on the instructions of its
// per-lane dot products and cross-lane reductions (ncu, H200: two warps a scheduler, 8.6 cycles
// an instruction); here a warp issues a tenth of them.
//
// Tiles of 16 x kWarps tokens arrive in shared memory by cp.async (kStages buffers, rows past the
// split's end zero-filled); warp w takes tokens [16w, 16w + 16) of each tile with the math of
// split_kv_warp.cuh. At the end the warps' (m, l, O) meet in shared memory (over the tile
// buffers) and each output element adds the warps in warp order: deterministic.
#pragma once

#include <cstdint>

#include "decode/decode_device.cuh"
#include "decode/split_kv_warp.cuh"
#include "decode/unfused_launch.h"

namespace tessera::decode::kernels::split_kv_mma {

template <typename T, int D, int kWarps, int kStages>
struct Geometry {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTile = 16 * kWarps;             // tokens a tile
  static constexpr int kChunks = D / 8;                 // 16-byte chunks a row
  static constexpr int kTileBytes = 2 * kTile * D * 2;  // K and V
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kOStride = split_kv_warp::kMergeStride<D>;
  static constexpr int kMergeBytes = (kWarps * 16 * kOStride + 2 * kWarps * 16) * 4;
  static constexpr int kBufferBytes = kStages * kTileBytes;
  static constexpr int kSmemBytes = kBufferBytes > kMergeBytes ? kBufferBytes : kMergeBytes;
  // Chunk c of row r stored at c ^ (r % 8): ldmatrix's eight rows of one chunk column, and the
  // loads' eight chunks of one row, fall on eight different bank groups.
  __device__ static int swizzled(int row, int chunk) { return row * kChunks + (chunk ^ (row & 7)); }
};

template <typename T, int D, int kN, int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32) split_kv_mma_kernel(const UnfusedDecodeParams p) {
  using G = Geometry<T, D, kWarps, kStages>;
  extern __shared__ __align__(16) uint4 smem[];  // [kStages][K, V][kTile x kChunks] / the merge
  const int split = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t context = int64_t(p.positions[b]) + 1;
  const int64_t chunk = (context + p.splits - 1) / p.splits;
  const int64_t begin = split * chunk, end = min(context, begin + chunk);
  const int tiles = end > begin ? int((end - begin + G::kTile - 1) / G::kTile) : 0;
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  // Tile i's keys and values into buffer `stage`: each thread one chunk column of every
  // kRowsPerPass-th row, so its address work is a few independent page lookups.
  auto load = [&](int i, int stage) {
    uint4* k_s = smem + size_t(stage) * 2 * G::kTile * G::kChunks;
    uint4* v_s = k_s + G::kTile * G::kChunks;
    const int col = threadIdx.x % G::kChunks;
#pragma unroll
    for (int j = 0; j < G::kTile / G::kRowsPerPass; ++j) {
      const int row = threadIdx.x / G::kChunks + j * G::kRowsPerPass;
      const int64_t t = begin + int64_t(i) * G::kTile + row;
      const bool valid = t < end;
      const int64_t offset = (cache_row_of(p, b, valid ? t : begin) * p.num_kv_heads + kv_head) * D;
      cp_async16_or_zero(k_s + G::swizzled(row, col), k_cache + offset + col * 8, valid);
      cp_async16_or_zero(v_s + G::swizzled(row, col), v_cache + offset + col * 8, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < tiles) load(s, s);
    cp_async_commit();
  }
  const int64_t q_stride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_heads) * D;
  const T* q = static_cast<const T*>(p.q) + b * q_stride + int64_t(kv_head) * group * D;
  uint32_t qb[D / 16][kN][2];
  split_kv_warp::load_q<T, D, kN>(q, group, lane, qb);
  const float scale = p.softmax_scale * kLog2e;
  split_kv_warp::Partial<D, kN> w;
  for (int i = 0; i < tiles; ++i) {
    cp_async_wait<kStages - 1>();  // tile i landed (one group is committed every iteration)
    __syncthreads();
    const uint4* k_s = smem + size_t(i % kStages) * 2 * G::kTile * G::kChunks;
    const uint4* v_s = k_s + G::kTile * G::kChunks;
    split_kv_warp::attend<T, D, kN>(
        qb, [&](int r, int ch) { return k_s + G::swizzled(warp * 16 + r, ch); },
        [&](int r, int ch) { return v_s + G::swizzled(warp * 16 + r, ch); },
        begin + int64_t(i) * G::kTile + warp * 16, end, scale, lane, w);
    __syncthreads();  // every warp is done with the buffer the next load refills
    if (i + kStages < tiles) load(i + kStages, i % kStages);
    cp_async_commit();
  }
  cp_async_wait<0>();
  // The warps' rows meet over the tile buffers (every warp is past its last read of them).
  float* o_s = reinterpret_cast<float*>(smem);   // [kWarps][16][kOStride]
  float* m_s = o_s + kWarps * 16 * G::kOStride;  // [kWarps][16]
  float* l_s = m_s + kWarps * 16;                // [kWarps][16]
  w.reduce_sums();
  __syncthreads();
  split_kv_warp::stash(w, group, warp * 16, lane, o_s, m_s, l_s);
  __syncthreads();
  split_kv_warp::write_partials<D>(o_s, m_s, l_s, kWarps, 16, group, threadIdx.x, G::kThreads, p, b,
                                   kv_head, split);
}

}  // namespace tessera::decode::kernels::split_kv_mma
