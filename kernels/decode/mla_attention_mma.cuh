// Split-KV attention over MLA's latent rows on tensor cores, the form FlashMLA and FlashInfer's
// MLA kernel take: a CTA takes 16 heads of one sequence over one split of its tokens, so each
// latent row is read once for all of them, and both products are m16n8k16 MMAs with the 16
// heads as M:
//   scores  S [16 heads x 32 tokens] = Q [16 x 576] . K^T, Q the absorbed query and the rotated
//           rope part (scaled, log2 domain, rounded to T), K the staged latent rows; warp w
//           scores tokens [8w, 8w + 8) of a stage;
//   softmax the rows' running maximum and sum across the four warps through shared memory, in
//           warp order; P rounded to T into shared memory;
//   values  O [16 x 512] += P . V, V the same staged rows' first 512 columns; warp w owns
//           columns [128w, 128w + 128).
// Stages of 32 rows double-buffered with cp.async (rows past the split's end zero-filled).
// Partials as split_attention_kernel writes them (o / l, log2 l + m), for its merge.
// DeepSeek's shape only (kv_lora_rank 512, rope_head_dim 64): launch_mla_split_attention
// checks and keeps the CUDA-core kernel for others.
#pragma once

#include <cstdint>

#include "cluster/cluster_collectives.cuh"
#include "decode/decode_device.cuh"
#include "decode/mla_unfused_launch.h"
#include "decode/mma_device.cuh"

namespace tessera::decode::kernels::mla_mma {

namespace cl = tessera::cluster;

constexpr int kRank = 512, kRope = 64, kWidth = kRank + kRope;
constexpr int kHeads = 16;                      // an MMA's M: the heads a CTA takes
constexpr int kTokens = 32;                     // latent rows a stage holds
constexpr int kWarps = 4;                       // kTokens / 8 score columns each
constexpr int kThreads = kWarps * 32;
constexpr int kColsPerWarp = kRank / kWarps;    // 128 output columns
constexpr int kColTiles = kColsPerWarp / 8;     // 16 n8 tiles
constexpr int kStride = kWidth + 8;             // elements a staged row (16 bytes of padding:
                                                // ldmatrix's eight rows land on distinct banks)
constexpr int kPStride = kTokens + 8;           // elements a row of P

// Shared memory, in bytes: Q, two stages, P, the warps' row maxima and sums.
constexpr int kQBytes = kHeads * kStride * 2;
constexpr int kStageBytes = kTokens * kStride * 2;
constexpr int kPBytes = kHeads * kPStride * 2;
constexpr int kSmemBytes = kQBytes + 2 * kStageBytes + kPBytes + 2 * kWarps * kHeads * 4;

template <typename T>
__global__ void __launch_bounds__(kThreads) split_attention_mma_kernel(const MlaUnfusedParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* stages = reinterpret_cast<T*>(smem + kQBytes);
  T* p_s = reinterpret_cast<T*>(smem + kQBytes + 2 * kStageBytes);
  float* red_max = reinterpret_cast<float*>(smem + kQBytes + 2 * kStageBytes + kPBytes);
  float* red_sum = red_max + kWarps * kHeads;

  const int split = blockIdx.x, b = blockIdx.y, h0 = blockIdx.z * kHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int dq = p.nope + p.rope;
  const int64_t len = int64_t(p.positions[b]) + 1;
  const int64_t chunk = (len + p.splits - 1) / p.splits;
  const int64_t begin = min(len, split * chunk), end = min(len, begin + chunk);

  // Q: head h0 + r's absorbed query and rotated rope part, scaled into the log2 domain and
  // rounded; rows past the model's heads are zero.
  const float scale = p.softmax_scale * kLog2e;
  for (int i = threadIdx.x; i < kHeads * kWidth; i += kThreads) {
    const int r = i / kWidth, j = i % kWidth, h = h0 + r;
    float v = 0.f;
    if (h < p.num_heads) {
      const int64_t bh = int64_t(b) * p.num_heads + h;
      v = j < kRank ? p.ql[bh * kRank + j]
                    : cl::to_f32(static_cast<const T*>(p.q)[bh * dq + p.nope + j - kRank]);
    }
    q_s[r * kStride + j] = cl::from_f32<T>(v * scale);
  }

  // Stage `buffer` <- rows [t0, t0 + kTokens) of sequence b, zeros past the split's end.
  auto load_stage = [&](int buffer, int64_t t0) {
    T* dst = stages + buffer * (kTokens * kStride);
    for (int i = threadIdx.x; i < kTokens * (kWidth / 8); i += kThreads) {
      const int r = i / (kWidth / 8), v = i % (kWidth / 8);
      const bool valid = t0 + r < end;
      const T* src = static_cast<const T*>(p.cache) +
                     (valid ? cache_row_of(p, b, t0 + r) * kWidth + v * 8 : 0);
      cp_async16_or_zero(dst + r * kStride + v * 8, src, valid);
    }
    cp_async_commit();
  };

  float o[kColTiles][4] = {};
  float m_lo = kNoKey, m_hi = kNoKey, l_lo = 0.f, l_hi = 0.f;  // rows g and g + 8
  const int passes = int((end - begin + kTokens - 1) / kTokens);
  if (passes > 0) load_stage(0, begin);
  for (int pass = 0; pass < passes; ++pass) {
    const int64_t t0 = begin + int64_t(pass) * kTokens;
    if (pass + 1 < passes) {
      load_stage((pass + 1) % 2, t0 + kTokens);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this pass's stage (and, first, Q) is in shared memory for every warp
    const T* k_s = stages + (pass % 2) * (kTokens * kStride);

    // Scores of this warp's 8 tokens: two k16 steps per 32 columns, into four accumulators
    // taken in turn (one would chain all 36 MMAs, each waiting out the previous one's latency),
    // summed in a fixed order.
    float acc[4][4] = {};
#pragma unroll
    for (int kk = 0; kk < kWidth; kk += 32) {
      const int a = (kk / 32) % 2;
      uint32_t a0[4], a1[4], kb[4];
      ldmatrix_x4<false>(a0, q_s + (lane % 16) * kStride + kk + (lane / 16) * 8);
      ldmatrix_x4<false>(a1, q_s + (lane % 16) * kStride + kk + 16 + (lane / 16) * 8);
      ldmatrix_x4<false>(kb, k_s + (8 * warp + lane % 8) * kStride + kk + (lane / 8) * 8);
      mma16816<T>(acc[2 * a], a0[0], a0[1], a0[2], a0[3], kb[0], kb[1]);
      mma16816<T>(acc[2 * a + 1], a1[0], a1[1], a1[2], a1[3], kb[2], kb[3]);
    }
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
    // s[0], s[1]: row g, tokens 8 warp + 2c, +1; s[2], s[3]: row g + 8. Past the end: no key.
    const int64_t tok = t0 + 8 * warp + 2 * c;
    if (tok >= end) s[0] = s[2] = kNoKey;
    if (tok + 1 >= end) s[1] = s[3] = kNoKey;
    float mx_lo = fmaxf(s[0], s[1]), mx_hi = fmaxf(s[2], s[3]);
#pragma unroll
    for (int o_ = 1; o_ < 4; o_ *= 2) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, o_));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, o_));
    }
    if (c == 0) {
      red_max[warp * kHeads + g] = mx_lo;
      red_max[warp * kHeads + g + 8] = mx_hi;
    }
    __syncthreads();
    float new_lo = m_lo, new_hi = m_hi;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      new_lo = fmaxf(new_lo, red_max[w * kHeads + g]);
      new_hi = fmaxf(new_hi, red_max[w * kHeads + g + 8]);
    }
    // A row that has seen no key yet (new = -inf) gets probabilities 0.
    auto prob = [](float x, float m) { return m == kNoKey ? 0.f : exp2f(x - m); };
    const float p0 = prob(s[0], new_lo), p1 = prob(s[1], new_lo);
    const float p2 = prob(s[2], new_hi), p3 = prob(s[3], new_hi);
    float sum_lo = p0 + p1, sum_hi = p2 + p3;
#pragma unroll
    for (int o_ = 1; o_ < 4; o_ *= 2) {
      sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, o_);
      sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, o_);
    }
    if (c == 0) {
      red_sum[warp * kHeads + g] = sum_lo;
      red_sum[warp * kHeads + g + 8] = sum_hi;
    }
    const int col = 8 * warp + 2 * c;
    p_s[g * kPStride + col] = cl::from_f32<T>(p0);
    p_s[g * kPStride + col + 1] = cl::from_f32<T>(p1);
    p_s[(g + 8) * kPStride + col] = cl::from_f32<T>(p2);
    p_s[(g + 8) * kPStride + col + 1] = cl::from_f32<T>(p3);
    const float corr_lo = rescale(m_lo, new_lo), corr_hi = rescale(m_hi, new_hi);
    m_lo = new_lo;
    m_hi = new_hi;
    __syncthreads();  // P and the warps' sums are in shared memory
    float add_lo = 0.f, add_hi = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      add_lo += red_sum[w * kHeads + g];
      add_hi += red_sum[w * kHeads + g + 8];
    }
    l_lo = l_lo * corr_lo + add_lo;
    l_hi = l_hi * corr_hi + add_hi;
#pragma unroll
    for (int j = 0; j < kColTiles; ++j) {
      o[j][0] *= corr_lo;
      o[j][1] *= corr_lo;
      o[j][2] *= corr_hi;
      o[j][3] *= corr_hi;
    }

    // O += P . V over this warp's columns: P's two k16 steps, V's [token][column] rows
    // transposed by ldmatrix into B fragments, two column tiles a load.
    uint32_t pa[2][4];
    ldmatrix_x4<false>(pa[0], p_s + (lane % 16) * kPStride + (lane / 16) * 8);
    ldmatrix_x4<false>(pa[1], p_s + (lane % 16) * kPStride + 16 + (lane / 16) * 8);
#pragma unroll
    for (int j = 0; j < kColTiles; j += 2) {
      const int n = warp * kColsPerWarp + j * 8;
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        uint32_t vb[4];
        ldmatrix_x4<true>(vb, k_s + (step * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride + n +
                                  (lane / 16) * 8);
        mma16816<T>(o[j], pa[step][0], pa[step][1], pa[step][2], pa[step][3], vb[0], vb[1]);
        mma16816<T>(o[j + 1], pa[step][0], pa[step][1], pa[step][2], pa[step][3], vb[2], vb[3]);
      }
    }
    __syncthreads();  // the stage, P and the sums are read before the next pass writes them
  }

  // This split's partials: o / l (0 where no key), log2 l + m.
  const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
  const int h_lo = h0 + g, h_hi = h0 + g + 8;
  const int64_t row_lo = (int64_t(b) * p.num_heads + h_lo) * p.splits + split;
  const int64_t row_hi = (int64_t(b) * p.num_heads + h_hi) * p.splits + split;
#pragma unroll
  for (int j = 0; j < kColTiles; ++j) {
    const int col = warp * kColsPerWarp + j * 8 + 2 * c;
    if (h_lo < p.num_heads) {
      p.partial_o[row_lo * kRank + col] = o[j][0] * inv_lo;
      p.partial_o[row_lo * kRank + col + 1] = o[j][1] * inv_lo;
    }
    if (h_hi < p.num_heads) {
      p.partial_o[row_hi * kRank + col] = o[j][2] * inv_hi;
      p.partial_o[row_hi * kRank + col + 1] = o[j][3] * inv_hi;
    }
  }
  if (warp == 0 && c == 0) {
    if (h_lo < p.num_heads) p.partial_lse[row_lo] = l_lo > 0.f ? m_lo + log2f(l_lo) : kNoKey;
    if (h_hi < p.num_heads) p.partial_lse[row_hi] = l_hi > 0.f ? m_hi + log2f(l_hi) : kNoKey;
  }
}

}  // namespace tessera::decode::kernels::mla_mma
