// Fused MLA decode attention block (AttentionKind::kLatent, the absorbed form) for Hopper: one
// thread-block cluster of N CTAs per query head, the ClusterFusion appendix's dataflow as
// src/decode/split_geometry.h cuts it (and src/decode/latent_split_emulation.cc emulates it):
//   input        every CTA reads the batch tile's rows of x whole (times the norm weight,
//                rounded) and their RMS;
//   projections  CTA r computes its slice of the head's query rows and of the latent row
//                [c, kr] (a warp a weight row, 16-byte loads, the batch tile's rows of x from
//                shared memory), ClusterGather;
//   latent row   c's RMSNorm and kr's RoPE; head 0's CTA N-1 appends the row to the cache,
//                every CTA attends to its own copy of it;
//   absorption   CTA r computes its slice of ql = W_UK_h^T qn, ClusterGather;
//   attention    each warp streams its share of the CTA's sequence slice, a lane holding
//                every 32nd of the row's R + Dr entries, online softmax in the log2 domain;
//                warps merge in warp order, the cluster by ClusterReduce (maximum, then the
//                rescaled sums in rank order);
//   value up     CTA r's partial of W_UV_h o_lat over its slice of R, ClusterReduce;
//   output       CTA r's rows of Wo's columns of the head: a per-head partial, added over the
//                heads in head order by the second kernel (sum_heads.cuh).
// No atomics: the output is bitwise the same from run to run. This is the first, plain form of
// the kernel (CUDA-core arithmetic, no cp.async pipeline; its loops keep several loads in
// flight): correct first, then fast. Its known cost: a cluster per query head means every
// head's cluster streams the whole latent cache, 16 reads of each cached row per step for
// DeepSeek-V2-Lite, where the row is shared by every head (MQA); the next form takes all heads
// of a sequence in one CTA, as FlashMLA and FlashInfer's MLA kernel do (docs/ARCHITECTURE.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>

#include "cluster/cluster_collectives.cuh"
#include "decode/decode_device.cuh"
#include "decode/mla_launch.h"
#include "decode/split_geometry.h"

namespace tessera::decode::kernels::mla {

namespace cl = tessera::cluster;

constexpr int kB = kMlaBatchTile;
constexpr int kThreads = kMlaThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = kMlaMaxRowWidth / 32;  // row entries a lane holds in the attention
constexpr int kRowsInFlight = 4;                 // cached rows a warp loads ahead of its softmax

template <typename T>
__device__ inline float load_f(const void* base, int64_t i) {
  return cl::to_f32(static_cast<const T*>(base)[i]);
}

static __device__ __noinline__ void bad_position(int seq, int pos, int64_t max_context) {
  printf("tessera fused MLA decode: positions[%d] = %d: expected 0 <= p < max_context = %lld\n",
         seq, pos, static_cast<long long>(max_context));
  __trap();
}

template <typename T>
struct MlaDecode {
  const MlaDecodeParams& p;
  unsigned char* smem;
  MlaSmemLayout L;
  int rank, n, head, b0, nb, warp, lane;
  int dq, width;  // Dn + Dr, R + Dr

  __device__ T* x_s() const { return reinterpret_cast<T*>(smem + L.x); }
  __device__ float* f(int offset) const { return reinterpret_cast<float*>(smem + offset); }
  __device__ int position(int b) const { return p.positions[b0 + b]; }

  // Entry i of sequence b in a gathered [n][kB][w / n] buffer.
  __device__ int gathered(int b, int i, int w) const {
    const int per = w / n;
    return (i / per) * kB * per + b * per + i % per;
  }

  // The latent cache row of token t of sequence b (the page index checked).
  __device__ T* cache_row(int b, int64_t t) const {
    return static_cast<T*>(p.cache) + cache_row_of(p, b0 + b, t) * width;
  }

  // ---- input: x times the norm weight (rounded) into x_s, each row's rstd ------------------
  __device__ void setup() {
    const cl::cg::cluster_group cluster = cl::cg::this_cluster();
    rank = int(cluster.block_rank());
    n = int(cluster.num_blocks());
    head = blockIdx.x / n;
    b0 = blockIdx.y * kB;
    nb = min(kB, p.batch - b0);
    warp = threadIdx.x / 32;
    lane = threadIdx.x % 32;
    dq = p.nope + p.rope;
    width = p.rank + p.rope;
    L = mla_smem_layout(p.hidden, p.rank, p.nope, p.rope, p.v_dim, int(sizeof(T)));
    if (threadIdx.x < nb) {
      const int pos = position(threadIdx.x);
      if (pos < 0 || pos >= p.max_context) bad_position(b0 + threadIdx.x, pos, p.max_context);
    }
    const T* gamma = static_cast<const T*>(p.input_norm);
    for (int b = warp; b < kB; b += kWarps) {
      float sq = 0.f;
      for (int i = lane * 8; i < p.hidden; i += 32 * 8) {
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (b < nb)
          raw = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) +
                                                int64_t(b0 + b) * p.hidden + i);
        if (gamma != nullptr) {
          float xf[8], gf[8];
          to_float8<T>(raw, xf);
          to_float8<T>(*reinterpret_cast<const uint4*>(gamma + i), gf);
          T* out = reinterpret_cast<T*>(&raw);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            sq += xf[e] * xf[e];
            out[e] = cl::from_f32<T>(xf[e] * gf[e]);
          }
        }
        *reinterpret_cast<uint4*>(x_s() + b * p.hidden + i) = raw;
      }
      sq = warp_sum(sq);
      if (lane == 0)
        f(L.rstd)[b] = gamma != nullptr ? rsqrtf(sq / float(p.hidden) + p.rms_eps) : 1.f;
    }
    __syncthreads();
  }

  // ---- projections: this CTA's query and latent rows over all of hidden, then gathered ------
  __device__ void project() const {
    const Range rq = even_slice(dq, n, rank), rl = even_slice(width, n, rank);
    const int q_rows = int(rq.size()), rows = q_rows + int(rl.size());
    for (int r = warp; r < rows; r += kWarps) {
      const bool is_q = r < q_rows;
      const T* w = is_q ? static_cast<const T*>(p.wq) + (int64_t(head) * dq + rq.begin + r) * p.hidden
                        : static_cast<const T*>(p.wkv_a) + (rl.begin + r - q_rows) * int64_t(p.hidden);
      float acc[kB] = {};
#pragma unroll 4  // four 16-byte weight loads in flight: a warp's rows would otherwise wait out each
      for (int i = lane * 8; i < p.hidden; i += 32 * 8) {
        float wf[8];
        to_float8<T>(__ldg(reinterpret_cast<const uint4*>(w + i)), wf);
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          float xf[8];
          to_float8<T>(*reinterpret_cast<const uint4*>(x_s() + b * p.hidden + i), xf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[b] += wf[e] * xf[e];
        }
      }
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const float sum = warp_sum(acc[b]);
        if (lane != 0) continue;
        if (is_q) f(L.q)[rank * kB * q_rows + b * q_rows + r] = sum * f(L.rstd)[b];
        else f(L.lat)[rank * kB * int(rl.size()) + b * int(rl.size()) + (r - q_rows)] = sum * f(L.rstd)[b];
      }
    }
    cl::all_gather(f(L.q), kB * q_rows);
    cl::all_gather(f(L.lat), kB * int(rl.size()));
  }

  // ---- the latent row: c normalized, kr rotated, both rounded; q's rope part rotated --------
  __device__ void latent_row() const {
    const float* lat = f(L.lat);
    for (int b = 0; b < kB; ++b) {
      float sq = 0.f;
      for (int j = threadIdx.x; j < p.rank; j += kThreads) {
        const float c = lat[gathered(b, j, width)];
        sq += c * c;
      }
      const float total = cl::block_reduce(sq, cl::SumOp{}, f(L.scratch));
      const float crstd = rsqrtf(total / float(p.rank) + p.rms_eps);
      for (int j = threadIdx.x; j < p.rank; j += kThreads) {
        const float c = lat[gathered(b, j, width)] * crstd * load_f<T>(p.kv_a_norm, j);
        f(L.row)[b * width + j] = cl::to_f32(cl::from_f32<T>(c));
      }
    }
    const float q_scale = p.softmax_scale * kLog2e;
    const int pairs = p.rope / 2;
    for (int i = threadIdx.x; i < kB * pairs; i += kThreads) {
      const int b = i / pairs, k = i % pairs;
      float sn, cs;
      sincosf(float(b < nb ? position(b) : 0) * p.inv_freq[k], &sn, &cs);
      const float k0 = lat[gathered(b, p.rank + 2 * k, width)];
      const float k1 = lat[gathered(b, p.rank + 2 * k + 1, width)];
      f(L.row)[b * width + p.rank + 2 * k] = cl::to_f32(cl::from_f32<T>(k0 * cs - k1 * sn));
      f(L.row)[b * width + p.rank + 2 * k + 1] = cl::to_f32(cl::from_f32<T>(k0 * sn + k1 * cs));
      const float q0 = f(L.q)[gathered(b, p.nope + 2 * k, dq)];
      const float q1 = f(L.q)[gathered(b, p.nope + 2 * k + 1, dq)];
      f(L.qh)[b * p.rope + 2 * k] = (q0 * cs - q1 * sn) * q_scale;
      f(L.qh)[b * p.rope + 2 * k + 1] = (q0 * sn + q1 * cs) * q_scale;
    }
    __syncthreads();
    // The row is appended once, by head 0's CTA N-1; no CTA reads it back from the cache (it
    // is past every slice of cached tokens).
    if (head == 0 && rank == new_token_rank(n)) {
      for (int i = threadIdx.x; i < nb * width; i += kThreads) {
        const int b = i / width, j = i % width;
        cache_row(b, position(b))[j] = cl::from_f32<T>(f(L.row)[b * width + j]);
      }
    }
  }

  // ---- absorption: this CTA's slice of ql = W_UK_h^T qn (log2-scaled), then gathered --------
  __device__ void absorb() const {
    const Range rr = even_slice(p.rank, n, rank);
    const int per = int(rr.size());
    const T* wuk = static_cast<const T*>(p.wkv_b) + int64_t(head) * (p.nope + p.v_dim) * p.rank;
    const float q_scale = p.softmax_scale * kLog2e;
    for (int jj = threadIdx.x; jj < per; jj += kThreads) {
      const int j = int(rr.begin) + jj;
      float acc[kB] = {};
#pragma unroll 8  // eight weight loads in flight, not one memory latency a step
      for (int i = 0; i < p.nope; ++i) {
        const float w = cl::to_f32(wuk[int64_t(i) * p.rank + j]);
#pragma unroll
        for (int b = 0; b < kB; ++b) acc[b] += f(L.q)[gathered(b, i, dq)] * w;
      }
#pragma unroll
      for (int b = 0; b < kB; ++b) f(L.ql)[rank * kB * per + b * per + jj] = acc[b] * q_scale;
    }
    cl::all_gather(f(L.ql), kB * per);
  }

  // ---- attention: this CTA's sequence slice, each warp a share of its tokens ----------------
  __device__ void attend() const {
    float* wp = f(L.warp) + warp * (p.rank + 2);
    for (int b = 0; b < kB; ++b) {
      float q[kPerLane], o[kPerLane];
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int j = lane + 32 * k;
        q[k] = j < p.rank ? f(L.ql)[gathered(b, j, p.rank)]
                          : (j < width ? f(L.qh)[b * p.rope + j - p.rank] : 0.f);
        o[k] = 0.f;
      }
      float m = kNoKey, l = 0.f;
      auto fold = [&](const float (&v)[kPerLane]) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) s += q[k] * v[k];
        s = warp_sum(s);
        const float m_new = fmaxf(m, s);
        const float corr = rescale(m, m_new), pr = exp2f(s - m_new);
        l = l * corr + pr;
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) o[k] = o[k] * corr + pr * v[k];
        m = m_new;
      };
      if (b < nb) {
        const int pos = position(b);
        if (warp == 0 && rank == new_token_rank(n)) {
          float v[kPerLane];
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) {
            const int j = lane + 32 * k;
            v[k] = j < width ? f(L.row)[b * width + j] : 0.f;
          }
          fold(v);
        }
        // The warp's tokens in order (t, t + kWarps, ...), kRowsInFlight rows loaded before the
        // first of them is folded: one row at a time waited out a memory latency per token.
        const Range s = seq_slice(pos, n, rank);
        for (int64_t t0 = s.begin + warp; t0 < s.end; t0 += int64_t(kWarps) * kRowsInFlight) {
          float v[kRowsInFlight][kPerLane];
#pragma unroll
          for (int u = 0; u < kRowsInFlight; ++u) {
            const int64_t t = t0 + int64_t(u) * kWarps;
            if (t >= s.end) break;
            const T* row = cache_row(b, t);
#pragma unroll
            for (int k = 0; k < kPerLane; ++k) {
              const int j = lane + 32 * k;
              v[u][k] = j < width ? cl::to_f32(row[j]) : 0.f;
            }
          }
#pragma unroll
          for (int u = 0; u < kRowsInFlight; ++u)
            if (t0 + int64_t(u) * kWarps < s.end) fold(v[u]);
        }
      }
      // The value part of the row is its first R entries.
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int j = lane + 32 * k;
        if (j < p.rank) wp[j] = o[k];
      }
      if (lane == 0) {
        wp[p.rank] = m;
        wp[p.rank + 1] = l;
      }
      __syncthreads();
      // The warps' partials merged in warp order into this CTA's partial of sequence b.
      float m_max = kNoKey;
      for (int w = 0; w < kWarps; ++w) m_max = fmaxf(m_max, f(L.warp)[w * (p.rank + 2) + p.rank]);
      for (int j = threadIdx.x; j <= p.rank; j += kThreads) {
        float acc = 0.f;
        for (int w = 0; w < kWarps; ++w) {
          const float* other = f(L.warp) + w * (p.rank + 2);
          acc += (j < p.rank ? other[j] : other[p.rank + 1]) * rescale(other[p.rank], m_max);
        }
        if (j < p.rank) f(L.part)[b * p.rank + j] = acc;
        else f(L.part)[kB * p.rank + b] = acc;
      }
      if (threadIdx.x == 0) f(L.m_own)[b] = m_max;
      __syncthreads();  // the warps' buffers are written again for the next sequence
    }
  }

  // The cluster's merge: the maximum, this CTA's partial rescaled to it, the sums in rank
  // order; o_lat = o / l rounded, into the absorbed query's space (no longer read).
  __device__ void finish_attention() const {
    for (int b = threadIdx.x; b < kB; b += kThreads) f(L.m)[b] = f(L.m_own)[b];
    cl::all_reduce<float, cl::MaxOp>(f(L.m), kB, cl::MaxOp{});
    for (int i = threadIdx.x; i < kB * (p.rank + 1); i += kThreads) {
      const int b = i < kB * p.rank ? i / p.rank : i - kB * p.rank;
      f(L.part)[i] *= rescale(f(L.m_own)[b], f(L.m)[b]);
    }
    cl::all_reduce<float, cl::SumOp>(f(L.part), kB * (p.rank + 1), cl::SumOp{});
    for (int i = threadIdx.x; i < kB * p.rank; i += kThreads) {
      const float l = f(L.part)[kB * p.rank + i / p.rank];
      f(L.ql)[i] = cl::to_f32(cl::from_f32<T>(l > 0.f ? f(L.part)[i] / l : 0.f));
    }
    __syncthreads();
  }

  // ---- value up-projection: this CTA's slice of R, summed over the cluster -----------------
  __device__ void value_up() const {
    const Range rr = even_slice(p.rank, n, rank);
    const T* wuv = static_cast<const T*>(p.wkv_b) +
                   (int64_t(head) * (p.nope + p.v_dim) + p.nope) * p.rank;
    for (int i = warp; i < p.v_dim; i += kWarps) {
      float acc[kB] = {};
#pragma unroll 4
      for (int64_t j = rr.begin + lane; j < rr.end; j += 32) {
        const float w = cl::to_f32(wuv[int64_t(i) * p.rank + j]);
#pragma unroll
        for (int b = 0; b < kB; ++b) acc[b] += w * f(L.ql)[b * p.rank + j];
      }
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const float sum = warp_sum(acc[b]);
        if (lane == 0) f(L.v)[b * p.v_dim + i] = sum;
      }
    }
    cl::all_reduce<float, cl::SumOp>(f(L.v), kB * p.v_dim, cl::SumOp{});
    for (int i = threadIdx.x; i < kB * p.v_dim; i += kThreads)
      f(L.v)[i] = cl::to_f32(cl::from_f32<T>(f(L.v)[i]));
    __syncthreads();
  }

  // ---- output: this CTA's rows of Wo over the head's Dv columns -> the head's partial ------
  __device__ void project_out() const {
    const Range ro = hidden_slice(p.hidden, n, rank);
    const int64_t ld = int64_t(p.num_heads) * p.v_dim;
    for (int64_t row = ro.begin + warp; row < ro.end; row += kWarps) {
      const T* w = static_cast<const T*>(p.wo) + row * ld + int64_t(head) * p.v_dim;
      float acc[kB] = {};
#pragma unroll 4
      for (int i = lane; i < p.v_dim; i += 32) {
        const float wf = cl::to_f32(w[i]);
#pragma unroll
        for (int b = 0; b < kB; ++b) acc[b] += wf * f(L.v)[b * p.v_dim + i];
      }
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const float sum = warp_sum(acc[b]);
        if (lane == 0 && b < nb)
          p.partial[(int64_t(head) * p.batch + b0 + b) * p.hidden + row] = sum;
      }
    }
  }

  __device__ void run() {
    setup();
    project();
    latent_row();
    absorb();
    attend();
    finish_attention();
    value_up();
    project_out();
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_kernel(const __grid_constant__ MlaDecodeParams params) {
  extern __shared__ __align__(16) unsigned char smem[];
  MlaDecode<T> k{params, smem};
  k.run();
}

}  // namespace tessera::decode::kernels::mla
