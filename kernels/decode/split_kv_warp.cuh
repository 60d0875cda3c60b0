// The warp-level math of the tensor-core split-KV kernels (split_kv_mma.cuh fed by cp.async,
// split_kv_tma.cuh fed by TMA), which differ only in how tiles reach shared memory. The keys are
// the MMA rows and a group's query heads the columns:
//   scores  S^T [16 tokens x 8 heads] = K . Q^T for a warp's 16 tokens, K's rows the A operand
//           (ldmatrix), Q's rows already the column-major B operand (registers, loaded once;
//           heads past the group zero); two accumulator chains over the head dimension;
//   softmax per head (a column: the 8 lanes of one c and the fragment's two rows), in the log2
//           domain in f32, running maximum and sum kept per lane's two heads;
//   values  O^T [D x 8 heads] += V^T . P^T: V's rows through ldmatrix.trans as the A operand,
//           P rounded to T and turned into the B fragment by movmatrix.trans;
// and the end of an item: each warp's heads into a merge area, then every output element adds the
// warps in warp order (deterministic) and writes the partials merge_splits_kernel reads (o / l,
// and log2 l + m).
//
// Why keys as rows: a GQA group has 1 to 16 query heads. As the rows of m16n8k16 (the form this
// replaced) a group of 4 filled a quarter of each MMA and a group of 1 a sixteenth; as its 8
// columns half or an eighth, so a 16-token block takes half the MMAs (16 at D 128, not 32), half
// the O accumulators and half their rescales. On a share of the SMs the TMA kernel is bound by
// its consumers' pace, and there this form reads 1.3x faster (docs/PERF.md, "Split-KV attention
// with the keys as MMA rows").
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

// The transpose of the 8x8 matrix of 16-bit values whose row g, columns 2c and 2c + 1 lane
// 4 g + c holds, in the same layout.
__device__ inline uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Floats a row of the merge area: rows 4 banks apart, so stash's stores from the four lanes
// that hold one dimension of different heads fall on different banks.
template <int D>
inline constexpr int kMergeStride = D + 4;

// n8 tiles of query heads a group takes (groups of up to 16).
__host__ __device__ constexpr int head_tiles(int group) {
  return group <= 8 ? 1 : 2;
}

// One warp's online-softmax state over its lane's heads 8 n + 2 c + h (lane = 4 g + c): the
// running maximum m and sum l (l over this lane's tokens until reduce_sums), and O^T's
// accumulators: o[mt][n] holds dimensions 16 mt + g (+ 8) of those heads.
template <int D, int kN>
struct Partial {
  static_assert(D == 64 || D == 128, "O's accumulators take D / 8 * kN registers a thread");
  float m[kN][2], l[kN][2];
  float o[D / 16][kN][4];
  __device__ Partial() {
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      m[n][0] = m[n][1] = kNoKey;
      l[n][0] = l[n][1] = 0.f;
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt)
        o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
    }
  }
  // l summed over the 8 lanes that hold a head's tokens.
  __device__ void reduce_sums() {
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int x = 4; x < 32; x *= 2) l[n][h] += __shfl_xor_sync(0xffffffffu, l[n][h], x);
  }
};

// Q's B fragments for the `group` query heads at q: head 8 n + g, dimensions 16 k + 2c, 2c + 1
// and 2c + 8, 2c + 9; heads past the group zero.
template <typename T, int D, int kN>
__device__ inline void load_q(const T* q, int group, int lane, uint32_t (&qb)[D / 16][kN][2]) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int k = 0; k < D / 16; ++k)
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int head = 8 * n + g, col = k * 16 + 2 * c + 8 * r;
        qb[k][n][r] = head < group ? *reinterpret_cast<const uint32_t*>(q + head * D + col) : 0u;
      }
}

// The warp's 16 tokens [first, first + 16) of a tile: key row r's 16-byte chunk ch at
// k_at(r, ch), value rows at v_at(r, ch) (shared memory); tokens at or past `end` masked (their
// value rows must hold finite numbers: P is 0 there). `scale` is the softmax scale times log2(e).
template <typename T, int D, int kN, typename KAt, typename VAt>
__device__ inline void attend(const uint32_t (&qb)[D / 16][kN][2], KAt k_at, VAt v_at,
                              int64_t first, int64_t end, float scale, int lane,
                              Partial<D, kN>& w) {
  const int g = lane / 4;
  float s[2][kN][4] = {};  // two chains: even and odd k16 steps
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    uint32_t ka[4];
    ldmatrix_x4<false>(ka, k_at(((lane / 8) % 2) * 8 + lane % 8, 2 * k + lane / 16));
#pragma unroll
    for (int n = 0; n < kN; ++n)
      mma16816<T>(s[k % 2][n], ka[0], ka[1], ka[2], ka[3], qb[k][n][0], qb[k][n][1]);
  }
  // s[.][n][e]: token first + g + 8 (e / 2), head 8 n + 2 c + e % 2.
  const int valid = int(min(int64_t(16), max(int64_t(0), end - first)));
  float f[kN][2];
  uint32_t pb[kN][2];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    float v[4], mx[2];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      v[e] = g + 8 * (e / 2) < valid ? (s[0][n][e] + s[1][n][e]) * scale : kNoKey;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(v[h], v[2 + h]);
#pragma unroll
      for (int x = 4; x < 32; x *= 2) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], x));
      const float m_new = fmaxf(w.m[n][h], mx[h]);
      f[n][h] = rescale(w.m[n][h], m_new);
      w.m[n][h] = m_new;
      w.l[n][h] *= f[n][h];
    }
    float pr[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e % 2;
      pr[e] = w.m[n][h] == kNoKey ? 0.f : exp2f(v[e] - w.m[n][h]);
      w.l[n][h] += pr[e];
    }
    pb[n][0] = transpose8x8(pack2<T>(pr[0], pr[1]));  // tokens 2c, 2c + 1 of head 8 n + g
    pb[n][1] = transpose8x8(pack2<T>(pr[2], pr[3]));  // tokens 2c + 8, 2c + 9
  }
#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt)
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      w.o[mt][n][0] *= f[n][0];
      w.o[mt][n][1] *= f[n][1];
      w.o[mt][n][2] *= f[n][0];
      w.o[mt][n][3] *= f[n][1];
    }
#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt) {
    uint32_t va[4];
    ldmatrix_x4<true>(va, v_at((lane / 16) * 8 + lane % 8, 2 * mt + (lane / 8) % 2));
#pragma unroll
    for (int n = 0; n < kN; ++n)
      mma16816<T>(w.o[mt][n], va[0], va[1], va[2], va[3], pb[n][0], pb[n][1]);
  }
}

// The warp's heads under `group` into the merge area at row `base` on (after reduce_sums):
// o_s [rows][kMergeStride], m_s and l_s [rows].
template <int D, int kN>
__device__ inline void stash(const Partial<D, kN>& w, int group, int base, int lane, float* o_s,
                             float* m_s, float* l_s) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = 8 * n + 2 * c + h;
      if (head >= group) continue;
      if (g == 0) {
        m_s[base + head] = w.m[n][h];
        l_s[base + head] = w.l[n][h];
      }
      float* dst = o_s + (base + head) * kMergeStride<D> + g;
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        dst[16 * mt] = w.o[mt][n][h];
        dst[16 * mt + 8] = w.o[mt][n][2 + h];
      }
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
