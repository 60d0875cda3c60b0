// Fused decode attention block (ClusterFusion's SplitToken dataflow) for Hopper: one
// thread-block cluster of N CTAs per KV head; RMSNorm, QKV projection, RoPE, KV-cache append,
// attention and output projection in one kernel; the sum over KV heads in a second one.
// attention_block.h states the math, src/decode/split_geometry.h the split.
//
// Decode is a stream of bytes (weights and the cache) past a little arithmetic, so the kernel
// is built to keep many loads in flight on every SM with no block-wide barrier on the way:
//   projections  each warp owns 16-row groups of the weight and reads them straight from
//                global memory into registers (16-byte loads, 8 K-chunks of 32 columns in
//                flight per lane), laid out so one load is one m16n8k16 A operand pair; x
//                (or the attention output) sits in shared memory as the B operand, so the
//                weights are read once for the whole batch tile;
//   attention    each warp streams its own ring of 2 KB stages (4 cached tokens of K and V)
//                with cp.async, a half-warp per token, online softmax in the log2 domain;
//                warps merge at each sequence's end;
//   phase seams  the first K/V stages are in flight while the cluster reduces the QKV
//                partials, and the output projection's weights are prefetched into L2 while it
//                merges the attention partials.
// The cluster meets three times (QKV sum; softmax maximum and sum) through ClusterReduce.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "cluster/cluster_collectives.cuh"
#include "decode/decode_device.cuh"
#include "decode/decode_launch.h"
#include "decode/mma_device.cuh"
#include "decode/split_geometry.h"
#include "decode/sum_heads.cuh"

namespace tessera::decode::kernels::sm90 {

namespace cl = tessera::cluster;

constexpr int kThreads = kFusedThreads;
constexpr int kWarps = kFusedWarps;
constexpr int kChunkCols = 32;  // weight columns of one 16-byte load per lane quad (2 MMAs)

// ---- small device helpers ----------------------------------------------------------------

// A weight vector read once: not kept in L1, the next 256 bytes fetched into L2 with it.
__device__ inline uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ inline void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// ---- projections: 16 weight rows times the batch tile on tensor cores ----------------------
// Lane (g = lane / 4, c = lane % 4) loads 8 consecutive columns [32k + 8c, +8) of rows g and
// g + 8 of the group. An m16n8k16 MMA wants columns {2c, 2c+1, 2c+8, 2c+9} of a 16-column
// block from lane c; any permutation of K is fine as long as A and B agree, so the 8 loaded
// columns feed two MMAs (columns 8c..8c+3, then 8c+4..8c+7), and the B operand is the same 8
// columns of batch row g, one 16-byte shared-memory load. acc[j] then holds rows g, g + 8 and
// batch columns 8j + 2c, +1, as the MMA lays out C.
template <typename T, int kNT, int kUnroll>
__device__ void gemv_rows16_unrolled(float (&acc)[kNT][4], const T* w, int64_t ld, int chunks,
                            const T* b_rows, int b_stride) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const T* a_lo = w + g * ld + c * 8;
  const T* a_hi = a_lo + 8 * ld;
  const T* b = b_rows + g * b_stride + c * 8;
  for (int k = 0; k < chunks; k += kUnroll) {
    uint4 lo[kUnroll], hi[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      lo[u] = load_stream(a_lo + (k + u) * kChunkCols);
      hi[u] = load_stream(a_hi + (k + u) * kChunkCols);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const uint4 x = *reinterpret_cast<const uint4*>(b + j * 8 * b_stride + (k + u) * kChunkCols);
        mma16816<T>(acc[j], lo[u].x, hi[u].x, lo[u].y, hi[u].y, x.x, x.y);
        mma16816<T>(acc[j], lo[u].z, hi[u].z, lo[u].w, hi[u].w, x.z, x.w);
      }
    }
  }
}

template <typename T, int kNT>
__device__ void gemv_rows16(float (&acc)[kNT][4], const T* w, int64_t ld, int chunks,
                            const T* b_rows, int b_stride) {
#pragma unroll
  for (int j = 0; j < kNT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  // Fewer loads in flight for wide batch tiles, whose accumulators take the registers.
  if (kNT == 1 && chunks % 8 == 0) gemv_rows16_unrolled<T, kNT, 8>(acc, w, ld, chunks, b_rows, b_stride);
  else gemv_rows16_unrolled<T, kNT, 4>(acc, w, ld, chunks, b_rows, b_stride);
}

// ---- the kernel ----------------------------------------------------------------------------

template <typename T, int kGroup, int kNT>
struct FusedDecode {
  static constexpr int kB = 8 * kNT;  // the batch tile
  static constexpr int D = kHeadDim;
  // The grouped kernels sit at their 128-register limit (two CTAs an SM), where the one-phase
  // ClusterReduce's registers made group 4 spill in its attention loop (Llama-3 b16 20% slower,
  // docs/PERF.md); they keep the three-barrier form.
  static constexpr bool kOnePhaseReduce = kGroup == 1;

  const FusedDecodeParams& p;
  unsigned char* smem;
  FusedSmemLayout L;
  int rank, n, kv_head, b0, nb;  // b0: first sequence of this batch tile, nb: its size
  int k_begin, slice;            // this CTA's hidden slice (QKV columns, Wo rows)
  int warp, lane;

  __device__ T* x_s() const { return reinterpret_cast<T*>(smem + L.a); }  // [B][x_stride]
  __device__ unsigned char* ring(int slot) const {
    return smem + L.a + (warp * kRingStages + slot) * kStageBytes;
  }
  __device__ float* part() const { return reinterpret_cast<float*>(smem + L.part); }
  __device__ float* q_s() const { return reinterpret_cast<float*>(smem + L.q); }  // [B][G][D], log2-scaled
  // Where dim d of a q row sits: dims 8l..8l+3 of every lane l first, then 8l+4..8l+7, so the
  // 16 lanes of a half-warp read each half of their 8 dims as one conflict-free float4 row.
  __device__ static int q_pos(int d) { return (d % 8 < 4 ? 0 : D / 2) + d / 8 * 4 + d % 4; }
  __device__ T* o_s() const { return reinterpret_cast<T*>(smem + L.q); }          // [B][o_stride]
  __device__ T* kv_new() const { return reinterpret_cast<T*>(smem + L.kv_new); }  // [B][2][D]
  __device__ float* warp_part() const { return reinterpret_cast<float*>(smem + L.warp_part); }
  __device__ float* m_s() const { return reinterpret_cast<float*>(smem + L.m); }
  __device__ float* m_own() const { return reinterpret_cast<float*>(smem + L.m_own); }
  __device__ float* s_new() const { return reinterpret_cast<float*>(smem + L.s_new); }
  __device__ int* seq_begin() const { return reinterpret_cast<int*>(smem + L.seq); }
  __device__ int* seq_end() const { return seq_begin() + kB; }
  __device__ int* seq_stages() const { return seq_begin() + 2 * kB; }

  __device__ int position(int b) const { return p.positions[b0 + b]; }

  // ---- setup: indices, this CTA's token slices, x (times the norm weight) into shared memory
  __device__ void setup() {
    const cl::cg::cluster_group cluster = cl::cg::this_cluster();
    rank = int(cluster.block_rank());
    n = int(cluster.num_blocks());
    kv_head = blockIdx.x / n;
    b0 = blockIdx.y * kB;
    nb = min(kB, p.batch - b0);
    slice = p.hidden / n;
    k_begin = rank * slice;
    L = fused_smem_layout(kGroup, kB, slice);
    warp = threadIdx.x / 32;
    lane = threadIdx.x % 32;
    if (threadIdx.x < kB) {
      const int b = threadIdx.x;
      int begin = 0, end = 0;
      if (b < nb) {
        const int pos = position(b);
        if (pos < 0 || pos + 1 > p.max_context) {
          printf("tessera fused decode: positions[%d] = %d: expected 0 <= p < max_context = %lld\n",
                 b0 + b, pos, static_cast<long long>(p.max_context));
          __trap();
        }
        const Range s = seq_slice(pos, n, rank);
        begin = int(s.begin);
        end = int(s.end);
      }
      seq_begin()[b] = begin;
      seq_end()[b] = end;
      seq_stages()[b] = (end - begin + kStageTokens - 1) / kStageTokens;
    }
    load_x();
    __syncthreads();
  }

  // x rows of the batch tile (zeros past the batch), scaled by the norm weight and rounded to
  // T as the model would, into x_s; each row's sum of squares over this slice (of x itself)
  // into part()'s tail, added in a fixed order. Warp w takes rows w, w + 8.
  __device__ void load_x() const {
    const T* gamma = static_cast<const T*>(p.input_norm);
    for (int b = warp; b < kB; b += kWarps) {
      float sq = 0.f;
      T* dst = x_s() + b * L.x_stride;
      for (int i = lane * 8; i < slice; i += 32 * 8) {
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (b < nb) raw = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + int64_t(b0 + b) * p.hidden + k_begin + i);
        if (gamma != nullptr) {
          float xf[8], gf[8];
          to_float8<T>(raw, xf);
          to_float8<T>(*reinterpret_cast<const uint4*>(gamma + k_begin + i), gf);
          T* out = reinterpret_cast<T*>(&raw);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            sq += xf[e] * xf[e];
            out[e] = cl::from_f32<T>(xf[e] * gf[e]);
          }
        }
        *reinterpret_cast<uint4*>(dst + i) = raw;
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) sq += __shfl_xor_sync(0xffffffffu, sq, o);
      if (lane == 0) part()[(kGroup + 2) * kB * D + b] = sq;
    }
  }

  // ---- QKV projection: this CTA's hidden slice of the (G+2) heads' 128 rows each ----------
  __device__ void project_qkv() const {
    const T* x = x_s();
    constexpr int kGroups = (kGroup + 2) * (D / 16);  // 16-row groups, a multiple of 8
    for (int grp = warp; grp < kGroups; grp += kWarps) {
      const T* w = qkv_rows(grp);
      float acc[kNT][4];
      gemv_rows16<T, kNT>(acc, w, p.hidden, slice / kChunkCols, x, L.x_stride);
      store_acc(acc, part() + (grp / (D / 16)) * kB * D + (grp % (D / 16)) * 16, D, kB);  // [rb][b][row]
    }
  }

  // First column of this CTA's slice in row group grp of the (G+2) heads' 128 rows each.
  __device__ const T* qkv_rows(int grp) const {
    const int rb = grp / (D / 16), r0 = (grp % (D / 16)) * 16;
    const void* base = rb < kGroup ? p.wq : (rb == kGroup ? p.wk : p.wv);
    const int64_t row = rb < kGroup ? int64_t(kv_head * kGroup + rb) * D + r0 : int64_t(kv_head) * D + r0;
    return static_cast<const T*>(base) + row * p.hidden + k_begin;
  }

  // acc of a 16-row group -> dst[b * ld + row] for b < limit_b (f32).
  __device__ void store_acc(const float (&acc)[kNT][4], float* dst, int64_t ld, int limit_b) const {
    const int g = lane / 4, c = lane % 4;
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int b = j * 8 + c * 2 + (e & 1);
        const int r = g + (e >> 1) * 8;
        if (b < limit_b) dst[b * ld + r] = acc[j][e];
      }
    }
  }

  // ---- after the QKV projection: cluster sum, norm, RoPE, cache append, new-token scores ---
  __device__ void finish_qkv() const {
    float* qkv = part();  // [G+2][B][D] then sumsq [B]
    cl::all_reduce<float, cl::SumOp, cl::DsmemPeers, kOnePhaseReduce>(qkv, (kGroup + 2) * kB * D + kB, cl::SumOp{});
    const float log2e = 1.4426950408889634f;
    for (int i = threadIdx.x; i < kB * (kGroup + 1) * (D / 2); i += kThreads) {
      const int b = i / ((kGroup + 1) * (D / 2)), h = (i / (D / 2)) % (kGroup + 1), d = i % (D / 2);
      if (b >= nb) continue;
      const float rstd = p.input_norm ? rsqrtf(qkv[(kGroup + 2) * kB * D + b] / p.hidden + p.rms_eps) : 1.f;
      const float* src = qkv + (h * kB + b) * D;
      const float x0 = src[d] * rstd, x1 = src[d + D / 2] * rstd;
      float sn, cs;
      sincosf(float(position(b)) * p.inv_freq[d], &sn, &cs);
      const float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
      if (h < kGroup) {
        const float scale = p.softmax_scale * log2e;
        q_s()[(b * kGroup + h) * D + q_pos(d)] = y0 * scale;
        q_s()[(b * kGroup + h) * D + q_pos(d + D / 2)] = y1 * scale;
      } else {
        kv_new()[b * 2 * D + d] = cl::from_f32<T>(y0);
        kv_new()[b * 2 * D + d + D / 2] = cl::from_f32<T>(y1);
        const float* vsrc = qkv + ((kGroup + 1) * kB + b) * D;
        kv_new()[b * 2 * D + D + d] = cl::from_f32<T>(vsrc[d] * rstd);
        kv_new()[b * 2 * D + D + d + D / 2] = cl::from_f32<T>(vsrc[d + D / 2] * rstd);
      }
    }
    __syncthreads();
    if (rank == 0) {  // append the new K and V to the cache (no CTA reads that row: it is past
                      // every slice of cached tokens)
      for (int i = threadIdx.x; i < nb * 2 * 16; i += kThreads) {
        const int b = i / 32, kv = (i / 16) % 2, chunk = i % 16;
        T* dst = const_cast<T*>(cache_row(kv ? p.v_cache : p.k_cache, b, position(b))) + chunk * 8;
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(kv_new() + (b * 2 + kv) * D + chunk * 8);
      }
    }
    if (rank == new_token_rank(n)) {  // the new token's scores, one warp per (b, head)
      for (int bh = warp; bh < nb * kGroup; bh += kWarps) {
        const int b = bh / kGroup;
        float s = 0;
        for (int d = lane; d < D; d += 32) s += q_s()[bh * D + q_pos(d)] * cl::to_f32(kv_new()[b * 2 * D + d]);
#pragma unroll
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) s_new()[bh] = s;
      }
    }
    // Attention partials (o, l) reuse the QKV partials' space; m starts empty.
    for (int i = threadIdx.x; i < kB * kGroup * (D + 1); i += kThreads) part()[i] = 0.f;
    for (int i = threadIdx.x; i < kB * kGroup; i += kThreads) m_s()[i] = -__builtin_huge_valf();
    __syncthreads();
  }

  // ---- the cache -----------------------------------------------------------------------------
  // The page holding cached token t of sequence b (paged caches), checked against the cache.
  __device__ int32_t page_of(int b, int64_t t) const {
    const int32_t page = p.page_table[(b0 + b) * p.pages_per_seq + t / p.page_size];
    if (page < 0 || page >= p.num_pages) bad_page(b0 + b, t / p.page_size, page, p.num_pages);
    return page;
  }
  // Row of cached token t of sequence b in the cache viewed as [rows, Hkv, D].
  __device__ int64_t cache_row_index(int b, int64_t t) const {
    return p.page_table != nullptr ? int64_t{page_of(b, t)} * p.page_size + t % p.page_size
                                   : int64_t{b0 + b} * p.context_stride + t;
  }
  __device__ const T* cache_row(const void* cache, int b, int64_t t) const {
    return static_cast<const T*>(cache) + (cache_row_index(b, t) * p.num_kv_heads + kv_head) * D;
  }

  // ---- attention: each warp's stages, in order over the batch tile's sequences ---------------
  // Stage k of sequence b holds cached tokens [begin_b + 4k, +4) of this CTA's slice; warp w
  // takes stages w, w + 8, ... of every sequence.
  struct Cursor {
    int b, k;
  };
  __device__ void settle(Cursor& c) const {
    while (c.b < nb && c.k >= seq_stages()[c.b]) {
      ++c.b;
      c.k = warp;
    }
  }
  __device__ Cursor first_stage() const {
    Cursor c{0, warp};
    settle(c);
    return c;
  }
  __device__ void next_stage(Cursor& c) const {
    c.k += kWarps;
    settle(c);
  }
  __device__ int stage_tokens(const Cursor& c) const {
    return min(kStageTokens, seq_end()[c.b] - (seq_begin()[c.b] + c.k * kStageTokens));
  }

  // Stage c into ring slot `slot`: K rows [4][D] then V rows [4][D] (16 lanes a row); one
  // commit group per call, empty past the last stage, so wait counts stay uniform. Stages
  // start on multiples of 4 tokens and pages hold multiples of 16: a stage is in one page.
  __device__ void issue_stage(const Cursor& c, int slot) const {
    if (c.b < nb) {
      const int tok0 = seq_begin()[c.b] + c.k * kStageTokens, ntok = stage_tokens(c);
      const int64_t row0 = cache_row_index(c.b, tok0);
      unsigned char* dst = ring(slot);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int idx = j * 32 + lane, kv = idx / 64, t = (idx % 64) / 16, chunk = idx % 16;
        if (t < ntok) {
          const T* src = static_cast<const T*>(kv ? p.v_cache : p.k_cache) +
                         ((row0 + t) * p.num_kv_heads + kv_head) * D + chunk * 8;
          cp_async16(dst + kv * (kStageBytes / 2) + t * D * 2 + chunk * 16, src);
        }
      }
    }
    cp_async_commit();
  }

  // A half-warp's running softmax over its tokens of one sequence, lane l16 holding dims
  // [8 * l16, +8); q stays in shared memory (registers go to the loads in flight).
  struct AttnState {
    float m[kGroup], l[kGroup], o[kGroup][8];
    const float* q;  // this lane's first q_pos in the sequence's q_s rows [G][D]
  };

  __device__ void start_sequence(AttnState& st, int b) const {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      st.m[g] = -__builtin_huge_valf();
      st.l[g] = 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) st.o[g][e] = 0.f;
    }
    st.q = q_s() + b * kGroup * D + (lane % 16) * 4;
  }

  // Half-warp h takes tokens h and h + 2 of the stage: their scores reduce side by side and
  // fold into the running softmax with one rescale.
  __device__ void attn_consume(AttnState& st, const unsigned char* stage, int ntok) const {
    constexpr int kPer = kStageTokens / 2;
    const int half = lane / 16, l16 = lane % 16;
    float k[kPer][8], v[kPer][8];
    bool valid[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int t = i * 2 + half;
      valid[i] = t < ntok;
      // Rows past ntok hold stale bytes (maybe NaN patterns): read zeros instead, since their
      // zero softmax weight would not cancel a NaN.
      // (Values, not a conditional reference: that compiled to eight 2-byte generic loads.)
      uint4 kr = make_uint4(0, 0, 0, 0), vr = kr;
      if (valid[i]) {
        kr = *reinterpret_cast<const uint4*>(stage + t * D * 2 + l16 * 16);
        vr = *reinterpret_cast<const uint4*>(stage + kStageBytes / 2 + t * D * 2 + l16 * 16);
      }
      to_float8<T>(kr, k[i]);
      to_float8<T>(vr, v[i]);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float4 q0 = *reinterpret_cast<const float4*>(st.q + g * D);
      const float4 q1 = *reinterpret_cast<const float4*>(st.q + g * D + D / 2);
      const float q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
      float s[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        s[i] = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) s[i] += q[e] * k[i][e];
      }
#pragma unroll
      for (int o = 8; o > 0; o /= 2)
#pragma unroll
        for (int i = 0; i < kPer; ++i) s[i] += __shfl_xor_sync(0xffffffffu, s[i], o);
      float m_new = st.m[g];
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        if (valid[i]) m_new = fmaxf(m_new, s[i]);
      const float corr = rescale(st.m[g], m_new);
      float pr[kPer], psum = 0;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        pr[i] = valid[i] ? exp2f(s[i] - m_new) : 0.f;
        psum += pr[i];
      }
      st.l[g] = st.l[g] * corr + psum;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float o = st.o[g][e] * corr;
#pragma unroll
        for (int i = 0; i < kPer; ++i) o += pr[i] * v[i][e];
        st.o[g][e] = o;
      }
      st.m[g] = m_new;
    }
  }

  // The register states of every half-warp for sequence b -> this CTA's partial (m, l, o) for
  // b, merged in warp order; the new token folded in on its rank.
  __device__ void flush(AttnState& st, int b) const {
    const int l16 = lane % 16;
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {  // the two half-warps: same dims, other tokens
      const float m_o = __shfl_xor_sync(0xffffffffu, st.m[g], 16);
      const float l_o = __shfl_xor_sync(0xffffffffu, st.l[g], 16);
      const float m_new = fmaxf(st.m[g], m_o);
      const float f_self = rescale(st.m[g], m_new), f_other = rescale(m_o, m_new);
      // Lower half first, so both halves compute the same sum.
      const float f_lo = lane < 16 ? f_self : f_other, f_hi = lane < 16 ? f_other : f_self;
      const float l_lo = lane < 16 ? st.l[g] : l_o, l_hi = lane < 16 ? l_o : st.l[g];
      st.l[g] = l_lo * f_lo + l_hi * f_hi;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float o_o = __shfl_xor_sync(0xffffffffu, st.o[g][e], 16);
        const float o_lo = lane < 16 ? st.o[g][e] : o_o, o_hi = lane < 16 ? o_o : st.o[g][e];
        st.o[g][e] = o_lo * f_lo + o_hi * f_hi;
      }
      st.m[g] = m_new;
      float* wp = warp_part() + (warp * kGroup + g) * (D + 2);
      if (lane < 16) {
#pragma unroll
        for (int e = 0; e < 8; ++e) wp[l16 * 8 + e] = st.o[g][e];
      }
      if (lane == 0) {
        wp[D] = st.m[g];
        wp[D + 1] = st.l[g];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kGroup * D; i += kThreads) {
      const int g = i / D, d = i % D;
      float m = -__builtin_huge_valf();
      for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_part()[(w * kGroup + g) * (D + 2) + D]);
      float l = 0, o = 0;
      for (int w = 0; w < kWarps; ++w) {
        const float* wp = warp_part() + (w * kGroup + g) * (D + 2);
        const float f = rescale(wp[D], m);
        l += wp[D + 1] * f;
        o += wp[d] * f;
      }
      if (rank == new_token_rank(n)) {
        const float s = s_new()[b * kGroup + g];
        const float m_new = fmaxf(m, s);
        const float f = rescale(m, m_new), pr = exp2f(s - m_new);
        l = l * f + pr;
        o = o * f + pr * cl::to_f32(kv_new()[b * 2 * D + D + d]);
        m = m_new;
      }
      part()[(b * kGroup + g) * D + d] = o;
      if (d == 0) {
        part()[kB * kGroup * D + b * kGroup + g] = l;
        m_s()[b * kGroup + g] = m;
      }
    }
    __syncthreads();
  }

  // Streams every sequence's slice through the warp's ring; `prod` is the producer's cursor,
  // kRingStages - 1 stages ahead (its first stages were issued before the QKV reduction).
  __device__ void attend(Cursor& prod) const {
    Cursor cons = first_stage();
    int slot = 0;
    for (int b = 0; b < nb; ++b) {
      AttnState st;
      start_sequence(st, b);
      while (cons.b == b) {
        cp_async_wait<kRingStages - 2>();
        __syncwarp();  // every lane's copies of this stage landed; every lane left the last one
        issue_stage(prod, (slot + kRingStages - 1) % kRingStages);
        next_stage(prod);
        attn_consume(st, ring(slot), stage_tokens(cons));
        slot = (slot + 1) % kRingStages;
        next_stage(cons);
      }
      flush(st, b);
    }
    cp_async_wait<0>();
  }

  // The cluster's softmax merge: max of m, rescale this CTA's (o, l), sum them; o / l -> o_s.
  __device__ void finish_attention() const {
    for (int i = threadIdx.x; i < kB * kGroup; i += kThreads) m_own()[i] = m_s()[i];
    cl::all_reduce<float, cl::MaxOp, cl::DsmemPeers, kOnePhaseReduce>(m_s(), kB * kGroup, cl::MaxOp{});
    float* o = part();                    // [B][G][D]
    float* l = part() + kB * kGroup * D;  // [B][G]
    for (int i = threadIdx.x; i < kB * kGroup * (D + 1); i += kThreads) {
      const int bg = i < kB * kGroup * D ? i / D : i - kB * kGroup * D;
      const float f = rescale(m_own()[bg], m_s()[bg]);
      if (i < kB * kGroup * D) o[i] *= f;
      else l[bg] *= f;
    }
    cl::all_reduce<float, cl::SumOp, cl::DsmemPeers, kOnePhaseReduce>(part(), kB * kGroup * (D + 1), cl::SumOp{});
    // o_s aliases q_s, which the attention no longer reads; rows past nb are zeros.
    for (int i = threadIdx.x; i < kB * kGroup * D; i += kThreads) {
      const int bg = i / D, b = bg / kGroup, col = (bg % kGroup) * D + i % D;
      const float denom = l[bg];
      o_s()[b * L.o_stride + col] = cl::from_f32<T>(b < nb && denom > 0.f ? o[i] / denom : 0.f);
    }
    __syncthreads();
  }

  // ---- output projection: rows [k_begin, +slice) of Wo over this KV group's G*D columns ------
  __device__ void prefetch_wo() const {
    const int64_t ld = int64_t(p.num_heads) * D;
    const T* base = static_cast<const T*>(p.wo) + int64_t(k_begin) * ld + int64_t(kv_head) * kGroup * D;
    constexpr int kLinesPerRow = kGroup * D * sizeof(T) / 128;
    for (int i = threadIdx.x; i < slice * kLinesPerRow; i += kThreads)
      prefetch_l2(base + (i / kLinesPerRow) * ld + (i % kLinesPerRow) * (128 / sizeof(T)));
  }

  __device__ void project_out() const {
    const int64_t ld = int64_t(p.num_heads) * D;
    for (int grp = warp; grp < slice / 16; grp += kWarps) {
      const int row0 = k_begin + grp * 16;
      const T* w = static_cast<const T*>(p.wo) + int64_t(row0) * ld + int64_t(kv_head) * kGroup * D;
      float acc[kNT][4];
      gemv_rows16<T, kNT>(acc, w, ld, kGroup * D / kChunkCols, o_s(), L.o_stride);
      store_acc(acc, p.partial + (int64_t(kv_head) * p.batch + b0) * p.hidden + row0, p.hidden, nb);
    }
  }

  __device__ void run() {
    setup();
    project_qkv();
    __syncthreads();  // x_s is dead: its space becomes the warps' K/V rings
    Cursor prod = first_stage();
    for (int s = 0; s < kRingStages - 1; ++s) {
      issue_stage(prod, s);
      next_stage(prod);
    }
    finish_qkv();
    attend(prod);
    prefetch_wo();
    finish_attention();
    project_out();
  }
};

template <typename T, int kGroup, int kNT>
__global__ void __launch_bounds__(kThreads, kGroup <= 4 ? 2 : 1)
    fused_decode_kernel(const __grid_constant__ FusedDecodeParams params) {
  extern __shared__ __align__(16) unsigned char smem[];
  // The head-sum kernel may start launching now; it waits for this grid's completion itself.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  FusedDecode<T, kGroup, kNT> k{params, smem};
  k.run();
}

}  // namespace tessera::decode::kernels::sm90
