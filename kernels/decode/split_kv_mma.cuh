// Split-KV decode attention on tensor cores: launch_split_kv_attention's kernel for 16-bit
// caches at head dimensions 64 and 128 (unfused_kernels.cu keeps the CUDA-core kernel for 256).
//
// CTA (split, kv_head, b) takes the split's tokens of [0, positions[b]] for the G <= 16 query
// heads of one KV head, which are the rows of m16n8k16 MMAs: each key and value row is read once
// for the group, and a warp's work for 16 tokens is a few dozen MMAs and ldmatrix loads. The
// CUDA-core kernel spent most of its time on the instructions of its per-lane dot products and
// cross-lane reductions (ncu, H200: two warps a scheduler, 8.6 cycles an instruction); here a
// warp issues a tenth of them.
//
// Tiles of 16 x kWarps tokens arrive in shared memory by cp.async (kStages buffers, rows past the
// split's end zero-filled); warp w takes tokens [16w, 16w + 16) of each tile:
//   scores  S [16 x 16] = Q . K^T, Q's A fragments loaded once from global memory (rows past G
//           zero), K staged [token][D]: already the column-major B operand;
//   softmax per row within the warp (a quad of lanes holds a row), scaled to the log2 domain in
//           f32; running maximum and sum kept per warp;
//   values  O [16 x D] += P . V, P rounded to T straight from S's accumulators (the C fragments
//           of two n8 tiles are the A fragment of one k16 step), V through ldmatrix.trans.
// At the end the warps' (m, l, O) meet in shared memory (over the tile buffers) and each output
// element adds the warps in warp order: deterministic. The partials are those split_kv_kernel
// writes (o / l, and log2 l + m), for merge_splits_kernel.
#pragma once

#include <cstdint>
#include <type_traits>

#include "decode/decode_device.cuh"
#include "decode/mma_device.cuh"
#include "decode/unfused_launch.h"

namespace tessera::decode::kernels::split_kv_mma {

template <typename T, int D, int kWarps, int kStages>
struct Geometry {
  static_assert(D == 64 || D == 128, "O's accumulators take D / 2 registers a thread");
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTile = 16 * kWarps;             // tokens a tile
  static constexpr int kChunks = D / 8;                 // 16-byte chunks a row
  static constexpr int kTileBytes = 2 * kTile * D * 2;  // K and V
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kOStride = D + 8;  // floats a merged row: rows 8 banks apart
  static constexpr int kMergeBytes = (kWarps * 16 * kOStride + 2 * kWarps * 16) * 4;
  static constexpr int kBufferBytes = kStages * kTileBytes;
  static constexpr int kSmemBytes = kBufferBytes > kMergeBytes ? kBufferBytes : kMergeBytes;
  // Chunk c of row r stored at c ^ (r % 8): ldmatrix's eight rows of one chunk column, and the
  // loads' eight chunks of one row, fall on eight different bank groups.
  __device__ static int swizzled(int row, int chunk) { return row * kChunks + (chunk ^ (row & 7)); }
};

template <typename T>
__device__ inline uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <typename T, int D, int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32) split_kv_mma_kernel(const UnfusedDecodeParams p) {
  using G = Geometry<T, D, kWarps, kStages>;
  constexpr int kKSteps = D / 16, kNTiles = D / 8;
  extern __shared__ __align__(16) uint4 smem[];  // [kStages][K, V][kTile x kChunks] / the merge
  const int split = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
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
  // Q's A fragments (rows g and g + 8, columns 2c, 2c + 1 and 2c + 8, 2c + 9 of each k16 step).
  const int64_t q_stride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_heads) * D;
  const T* q = static_cast<const T*>(p.q) + b * q_stride + int64_t(kv_head) * group * D;
  uint32_t qa[kKSteps][4];
#pragma unroll
  for (int k = 0; k < kKSteps; ++k) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = g + 8 * (r % 2), col = k * 16 + 2 * c + 8 * (r / 2);
      qa[k][r] = row < group ? *reinterpret_cast<const uint32_t*>(q + row * D + col) : 0u;
    }
  }
  const float scale = p.softmax_scale * kLog2e;
  float m[2] = {kNoKey, kNoKey}, l[2] = {0.f, 0.f};  // rows g, g + 8; l over this lane's columns
  float o[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  for (int i = 0; i < tiles; ++i) {
    cp_async_wait<kStages - 1>();  // tile i landed (one group is committed every iteration)
    __syncthreads();
    const uint4* k_s = smem + size_t(i % kStages) * 2 * G::kTile * G::kChunks;
    const uint4* v_s = k_s + G::kTile * G::kChunks;
    float s[2][4] = {};
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      uint32_t kb[4];
      ldmatrix_x4<false>(
          kb, k_s + G::swizzled(warp * 16 + (lane / 16) * 8 + lane % 8, 2 * k + (lane / 8) % 2));
      mma16816<T>(s[0], qa[k][0], qa[k][1], qa[k][2], qa[k][3], kb[0], kb[1]);
      mma16816<T>(s[1], qa[k][0], qa[k][1], qa[k][2], qa[k][3], kb[2], kb[3]);
    }
    // s[j][e]: row g + 8 (e / 2), token 16 warp + 8 j + 2 c + e % 2 of the tile.
    const int64_t t0 = begin + int64_t(i) * G::kTile + warp * 16 + 2 * c;
    float mx[2] = {kNoKey, kNoKey};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = t0 + 8 * j + e % 2 < end ? s[j][e] * scale : kNoKey;
        mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
      }
    }
    float f[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      f[r] = rescale(m[r], m_new);
      m[r] = m_new;
      l[r] *= f[r];
    }
    uint32_t pa[4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float pr[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pr[e] = m[e / 2] == kNoKey ? 0.f : exp2f(s[j][e] - m[e / 2]);
        l[e / 2] += pr[e];
      }
      pa[2 * j] = pack2<T>(pr[0], pr[1]);
      pa[2 * j + 1] = pack2<T>(pr[2], pr[3]);
    }
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      o[n][0] *= f[0];
      o[n][1] *= f[0];
      o[n][2] *= f[1];
      o[n][3] *= f[1];
    }
#pragma unroll
    for (int n = 0; n < kNTiles; n += 2) {
      uint32_t vb[4];
      const int row = warp * 16 + ((lane / 8) % 2) * 8 + lane % 8;
      ldmatrix_x4<true>(vb, v_s + G::swizzled(row, n + lane / 16));
      mma16816<T>(o[n], pa[0], pa[1], pa[2], pa[3], vb[0], vb[1]);
      mma16816<T>(o[n + 1], pa[0], pa[1], pa[2], pa[3], vb[2], vb[3]);
    }
    __syncthreads();  // every warp is done with the buffer the next load refills
    if (i + kStages < tiles) load(i + kStages, i % kStages);
    cp_async_commit();
  }
  cp_async_wait<0>();
  // The warps' rows meet over the tile buffers (every warp is past its last read of them).
  float* o_s = reinterpret_cast<float*>(smem);   // [kWarps][16][kOStride]
  float* m_s = o_s + kWarps * 16 * G::kOStride;  // [kWarps][16]
  float* l_s = m_s + kWarps * 16;                // [kWarps][16]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  __syncthreads();
  if (c == 0) {
    m_s[warp * 16 + g] = m[0];
    m_s[warp * 16 + g + 8] = m[1];
    l_s[warp * 16 + g] = l[0];
    l_s[warp * 16 + g + 8] = l[1];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row >= group) continue;
    float* dst = o_s + (warp * 16 + row) * G::kOStride + 2 * c;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2 * r], o[n][2 * r + 1]);
  }
  __syncthreads();
  // Four consecutive columns of one row a thread: the warps added in order, then o / l.
  for (int item = threadIdx.x; item < group * D / 4; item += G::kThreads) {
    const int row = item / (D / 4), col = item % (D / 4) * 4;
    float mm = kNoKey;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, m_s[w * 16 + row]);
    float ll = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int w = 0; w < kWarps; ++w) {
      const float fw = rescale(m_s[w * 16 + row], mm);
      const float4 v = *reinterpret_cast<const float4*>(o_s + (w * 16 + row) * G::kOStride + col);
      ll += l_s[w * 16 + row] * fw;
      acc.x += v.x * fw;
      acc.y += v.y * fw;
      acc.z += v.z * fw;
      acc.w += v.w * fw;
    }
    const float inv = ll > 0.f ? 1.f / ll : 0.f;
    const int64_t bh = int64_t(b) * p.num_heads + kv_head * group + row;
    *reinterpret_cast<float4*>(p.partial_o + (bh * p.splits + split) * D + col) =
        make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    if (col == 0) p.partial_lse[bh * p.splits + split] = ll > 0.f ? mm + log2f(ll) : kNoKey;
  }
}

}  // namespace tessera::decode::kernels::split_kv_mma
