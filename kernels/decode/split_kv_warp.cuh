// The warp-level math of the tensor-core split-KV kernels (split_kv_mma.cuh fed by cp.async,
// split_kv_tma.cuh fed by TMA), which differ only in how tiles reach shared memory:
//   scores  S [16 x 16] = Q . K^T for a warp's 16 tokens, Q's A fragments loaded once (rows
//           past the group zero), K's rows already the column-major B operand;
//   softmax per row within the warp (a quad of lanes holds a row), in the log2 domain in f32,
//           running maximum and sum kept per warp;
//   values  O [16 x D] += P . V, P rounded to T straight from S's accumulators (the C fragments
//           of two n8 tiles are the A fragment of one k16 step), V through ldmatrix.trans;
// and the end of an item: each warp's rows into a merge area, then every output element adds the
// warps in warp order (deterministic) and writes the partials merge_splits_kernel reads (o / l,
// and log2 l + m).
#pragma once

#include <cstdint>
#include <type_traits>

#include "decode/decode_device.cuh"
#include "decode/mma_device.cuh"
#include "decode/unfused_launch.h"

namespace tessera::decode::kernels::split_kv_warp {

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

// Floats a row of the merge area: rows 8 banks apart.
template <int D>
inline constexpr int kMergeStride = D + 8;

// One warp's online-softmax state over its rows g and g + 8 (lane = 4 g + c): the running
// maximum m and sum l (l over this lane's columns until reduce_sums), and O's accumulators.
template <int D>
struct Partial {
  static_assert(D == 64 || D == 128, "O's accumulators take D / 2 registers a thread");
  float m[2] = {kNoKey, kNoKey}, l[2] = {0.f, 0.f};
  float o[D / 8][4] = {};
  // l summed over the quad of lanes that holds a row.
  __device__ void reduce_sums() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
  }
};

// Q's A fragments for the `group` query heads at q: rows g and g + 8, columns 2c, 2c + 1 and
// 2c + 8, 2c + 9 of each k16 step; rows past the group zero.
template <typename T, int D>
__device__ inline void load_q(const T* q, int group, int lane, uint32_t (&qa)[D / 16][4]) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = g + 8 * (r % 2), col = k * 16 + 2 * c + 8 * (r / 2);
      qa[k][r] = row < group ? *reinterpret_cast<const uint32_t*>(q + row * D + col) : 0u;
    }
  }
}

// The warp's 16 tokens [first, first + 16) of a tile: key row r's 16-byte chunk ch at
// k_at(r, ch), value rows at v_at(r, ch) (shared memory); tokens at or past `end` masked.
// `scale` is the softmax scale times log2(e).
template <typename T, int D, typename KAt, typename VAt>
__device__ inline void attend(const uint32_t (&qa)[D / 16][4], KAt k_at, VAt v_at, int64_t first,
                              int64_t end, float scale, int lane, Partial<D>& w) {
  const int c = lane % 4;
  float s[2][4] = {};
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    uint32_t kb[4];
    ldmatrix_x4<false>(kb, k_at((lane / 16) * 8 + lane % 8, 2 * k + (lane / 8) % 2));
    mma16816<T>(s[0], qa[k][0], qa[k][1], qa[k][2], qa[k][3], kb[0], kb[1]);
    mma16816<T>(s[1], qa[k][0], qa[k][1], qa[k][2], qa[k][3], kb[2], kb[3]);
  }
  // s[j][e]: row g + 8 (e / 2), token first + 8 j + 2 c + e % 2.
  const int64_t t0 = first + 2 * c;
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
    const float m_new = fmaxf(w.m[r], mx[r]);
    f[r] = rescale(w.m[r], m_new);
    w.m[r] = m_new;
    w.l[r] *= f[r];
  }
  uint32_t pa[4];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float pr[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      pr[e] = w.m[e / 2] == kNoKey ? 0.f : exp2f(s[j][e] - w.m[e / 2]);
      w.l[e / 2] += pr[e];
    }
    pa[2 * j] = pack2<T>(pr[0], pr[1]);
    pa[2 * j + 1] = pack2<T>(pr[2], pr[3]);
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    w.o[n][0] *= f[0];
    w.o[n][1] *= f[0];
    w.o[n][2] *= f[1];
    w.o[n][3] *= f[1];
  }
#pragma unroll
  for (int n = 0; n < D / 8; n += 2) {
    uint32_t vb[4];
    ldmatrix_x4<true>(vb, v_at(((lane / 8) % 2) * 8 + lane % 8, n + lane / 16));
    mma16816<T>(w.o[n], pa[0], pa[1], pa[2], pa[3], vb[0], vb[1]);
    mma16816<T>(w.o[n + 1], pa[0], pa[1], pa[2], pa[3], vb[2], vb[3]);
  }
}

// The warp's rows under `group` into the merge area at row `base` on (after reduce_sums):
// o_s [rows][kMergeStride], m_s and l_s [rows].
template <int D>
__device__ inline void stash(const Partial<D>& w, int group, int base, int lane, float* o_s,
                             float* m_s, float* l_s) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row >= group) continue;
    if (c == 0) {
      m_s[base + row] = w.m[r];
      l_s[base + row] = w.l[r];
    }
    float* dst = o_s + (base + row) * kMergeStride<D> + 2 * c;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(w.o[n][2 * r], w.o[n][2 * r + 1]);
  }
}

// The partials of item (b, kv_head, split) from the merge area, where warp w stashed at row
// w * rows_per_warp: four consecutive columns of one row a thread (thread of threads), the
// warps rescaled and added in warp order, then o / l and log2 l + m.
template <int D>
__device__ inline void write_partials(const float* o_s, const float* m_s, const float* l_s,
                                      int warps, int rows_per_warp, int group, int thread,
                                      int threads, const UnfusedDecodeParams& p, int b, int kv_head,
                                      int split) {
  for (int item = thread; item < group * D / 4; item += threads) {
    const int row = item / (D / 4), col = item % (D / 4) * 4;
    float mm = kNoKey;
    for (int w = 0; w < warps; ++w) mm = fmaxf(mm, m_s[w * rows_per_warp + row]);
    float ll = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int w = 0; w < warps; ++w) {
      const int at = w * rows_per_warp + row;
      const float fw = rescale(m_s[at], mm);
      const float4 v = *reinterpret_cast<const float4*>(o_s + at * kMergeStride<D> + col);
      ll += l_s[at] * fw;
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

}  // namespace tessera::decode::kernels::split_kv_warp
