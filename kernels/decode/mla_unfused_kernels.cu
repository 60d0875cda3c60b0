// The unfused MLA decode block's kernels (mla_unfused_launch.h). Plain CUDA-core kernels: the
// baseline pipeline SGLang and vLLM run around their MLA attention (GEMMs and small kernels,
// each through global memory), with every order fixed so the result is the same run to run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cluster/cluster_collectives.cuh"
#include "decode/decode_device.cuh"
#include "decode/mla_attention_mma.cuh"
#include "decode/mla_unfused_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels {
namespace {

namespace cl = tessera::cluster;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatchChunk = 8;    // sequences one CTA of the per-head products takes
constexpr int kHeadsPerWarp = 2;  // the attention: a warp's heads (16 a CTA pass)
constexpr int kPerLane = kMlaMaxRowWidth / 32;
template <typename T>
__device__ T* latent_row(const MlaUnfusedParams& p, int b, int64_t t) {
  return static_cast<T*>(p.cache) + cache_row_of(p, b, t) * (p.rank + p.rope);
}

// One CTA a sequence: the latent row's norm (a block reduction in thread order), RoPE, the
// append; then the queries' rope parts.
template <typename T>
__global__ void __launch_bounds__(kThreads) latent_append_kernel(const MlaUnfusedParams p) {
  __shared__ float scratch[32];
  const int b = blockIdx.x, width = p.rank + p.rope, pos = p.positions[b];
  T* lat = static_cast<T*>(p.lat) + int64_t(b) * width;
  float sq = 0.f;
  for (int j = threadIdx.x; j < p.rank; j += kThreads) {
    const float c = cl::to_f32(lat[j]);
    sq += c * c;
  }
  const float rstd = rsqrtf(cl::block_reduce(sq, cl::SumOp{}, scratch) / float(p.rank) + p.rms_eps);
  T* dst = latent_row<T>(p, b, pos);
  for (int j = threadIdx.x; j < p.rank; j += kThreads)
    dst[j] = cl::from_f32<T>(cl::to_f32(lat[j]) * rstd * cl::to_f32(static_cast<const T*>(p.kv_a_norm)[j]));
  const int pairs = p.rope / 2, dq = p.nope + p.rope;
  for (int i = threadIdx.x; i < (p.num_heads + 1) * pairs; i += kThreads) {
    const int h = i / pairs, k = i % pairs;  // h == num_heads: the latent row's kr
    float sn, cs;
    sincosf(float(pos) * p.inv_freq[k], &sn, &cs);
    T* x = h < p.num_heads ? static_cast<T*>(p.q) + int64_t(b) * p.num_heads * dq + h * dq + p.nope
                           : lat + p.rank;
    const float x0 = cl::to_f32(x[2 * k]), x1 = cl::to_f32(x[2 * k + 1]);
    T* out = h < p.num_heads ? x : dst + p.rank;
    out[2 * k] = cl::from_f32<T>(x0 * cs - x1 * sn);
    out[2 * k + 1] = cl::from_f32<T>(x0 * sn + x1 * cs);
  }
}

// ql[b][h][j] = sum_i qn[b][h][i] W_UK_h[i][j]: grid (heads, R / kThreads rounded up, batch
// chunks); a thread an entry j for a chunk of sequences.
template <typename T>
__global__ void __launch_bounds__(kThreads) absorb_kernel(const MlaUnfusedParams p) {
  const int h = blockIdx.x, j = blockIdx.y * kThreads + threadIdx.x, b0 = blockIdx.z * kBatchChunk;
  if (j >= p.rank) return;
  const int nb = min(kBatchChunk, p.batch - b0), dq = p.nope + p.rope;
  const T* w = static_cast<const T*>(p.wkv_b) + int64_t(h) * (p.nope + p.v_dim) * p.rank + j;
  const T* q = static_cast<const T*>(p.q) + (int64_t(b0) * p.num_heads + h) * dq;
  float acc[kBatchChunk] = {};
  // Unrolled so eight weight loads are in flight at once: the grid is a few CTAs and each
  // iteration would otherwise wait out a full memory latency.
#pragma unroll 8
  for (int i = 0; i < p.nope; ++i) {
    const float wf = cl::to_f32(w[int64_t(i) * p.rank]);
#pragma unroll
    for (int b = 0; b < kBatchChunk; ++b)
      if (b < nb) acc[b] += cl::to_f32(q[int64_t(b) * p.num_heads * dq + i]) * wf;
  }
#pragma unroll
  for (int b = 0; b < kBatchChunk; ++b)
    if (b < nb) p.ql[(int64_t(b0 + b) * p.num_heads + h) * p.rank + j] = acc[b];
}

// grid (splits, batch): CTA s takes token chunk s of sequence b's rows [0, positions[b]] and
// every head, 16 at a time (two a warp): rows staged in shared memory kMlaTileRows at a time,
// each read once for the 16 heads; online softmax in the log2 domain; partials (o / l,
// log2 l + m).
template <typename T>
__global__ void __launch_bounds__(kThreads) split_attention_kernel(const MlaUnfusedParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);  // [kMlaTileRows][width]
  const int split = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int width = p.rank + p.rope, dq = p.nope + p.rope;
  const int64_t len = int64_t(p.positions[b]) + 1;
  const int64_t chunk = (len + p.splits - 1) / p.splits;
  const int64_t begin = min(len, split * chunk), end = min(len, begin + chunk);
  const float scale = p.softmax_scale * kLog2e;
  for (int h0 = 0; h0 < p.num_heads; h0 += kWarps * kHeadsPerWarp) {
    float q[kHeadsPerWarp][kPerLane], o[kHeadsPerWarp][kPerLane], m[kHeadsPerWarp], l[kHeadsPerWarp];
#pragma unroll
    for (int e = 0; e < kHeadsPerWarp; ++e) {
      const int h = h0 + warp * kHeadsPerWarp + e;
      m[e] = kNoKey;
      l[e] = 0.f;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int j = lane + 32 * k;
        float v = 0.f;
        if (h < p.num_heads && j < p.rank) v = p.ql[(int64_t(b) * p.num_heads + h) * p.rank + j];
        else if (h < p.num_heads && j < width)
          v = cl::to_f32(static_cast<const T*>(p.q)[(int64_t(b) * p.num_heads + h) * dq + p.nope + j - p.rank]);
        q[e][k] = v * scale;
        o[e][k] = 0.f;
      }
    }
    for (int64_t t0 = begin; t0 < end; t0 += kMlaTileRows) {
      const int rows = int(min(int64_t(kMlaTileRows), end - t0));
      __syncthreads();  // the previous tile is read
      // 16-byte loads (width is a multiple of 8 elements: the plan checks), all issued before
      // any is waited for.
      const int vecs = width / 8;
#pragma unroll 4
      for (int i = threadIdx.x; i < rows * vecs; i += kThreads)
        reinterpret_cast<uint4*>(tile)[i] =
            reinterpret_cast<const uint4*>(latent_row<T>(p, b, t0 + i / vecs))[i % vecs];
      __syncthreads();
      for (int r = 0; r < rows; ++r) {
        float v[kPerLane];
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const int j = lane + 32 * k;
          v[k] = j < width ? cl::to_f32(tile[r * width + j]) : 0.f;
        }
#pragma unroll
        for (int e = 0; e < kHeadsPerWarp; ++e) {
          float s = 0.f;
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) s += q[e][k] * v[k];
          s = warp_sum(s);
          const float m_new = fmaxf(m[e], s);
          const float corr = rescale(m[e], m_new), pr = exp2f(s - m_new);
          l[e] = l[e] * corr + pr;
#pragma unroll
          for (int k = 0; k < kPerLane; ++k) o[e][k] = o[e][k] * corr + pr * v[k];
          m[e] = m_new;
        }
      }
    }
#pragma unroll
    for (int e = 0; e < kHeadsPerWarp; ++e) {
      const int h = h0 + warp * kHeadsPerWarp + e;
      if (h >= p.num_heads) continue;
      const int64_t bhs = (int64_t(b) * p.num_heads + h) * p.splits + split;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int j = lane + 32 * k;
        if (j < p.rank) p.partial_o[bhs * p.rank + j] = l[e] > 0.f ? o[e][k] / l[e] : 0.f;
      }
      if (lane == 0) p.partial_lse[bhs] = l[e] > 0.f ? m[e] + log2f(l[e]) : kNoKey;
    }
  }
}

// Each split's weight 2^(lse_s - max) into weight[] and their sum, by the whole block (one
// thread walking the splits' log-sums would wait out a load per split); the sum's barrier also
// makes weight[] visible to every thread.
__device__ float split_weights(const MlaUnfusedParams& p, int64_t bh, float* weight, float* scratch) {
  const float* lse = p.partial_lse + bh * p.splits;
  float local = kNoKey;
  for (int s = threadIdx.x; s < p.splits; s += kThreads) local = fmaxf(local, lse[s]);
  const float lse_max = cl::block_reduce(local, cl::MaxOp{}, scratch);
  local = 0.f;
  for (int s = threadIdx.x; s < p.splits; s += kThreads) local += weight[s] = rescale(lse[s], lse_max);
  return cl::block_reduce(local, cl::SumOp{}, scratch);
}

// o_lat[b][h] = sum over splits of o_s 2^(lse_s - lse_max), over the same sum of weights; the
// numerator in split order. One CTA a (sequence, head).
template <typename T>
__global__ void __launch_bounds__(kThreads) merge_kernel(const MlaUnfusedParams p) {
  extern __shared__ float weight[];  // [splits]
  __shared__ float scratch[32];
  const int64_t bh = blockIdx.x;
  const float denom = split_weights(p, bh, weight, scratch);
  for (int j = threadIdx.x; j < p.rank; j += kThreads) {
    float acc = 0.f;
#pragma unroll 4
    for (int s = 0; s < p.splits; ++s) acc += p.partial_o[(bh * p.splits + s) * p.rank + j] * weight[s];
    static_cast<T*>(p.o_lat)[bh * p.rank + j] = cl::from_f32<T>(denom > 0.f ? acc / denom : 0.f);
  }
}

// merge_kernel's result, bitwise alike run to run but summed in another order: a CTA a
// (sequence, head, chunk of kMergeColumns columns), so at a few sequences the merge still fills
// the GPU, and each thread group sums a contiguous range of the splits in split order, the
// groups' sums then added in group order. One thread walking every split (merge_kernel) waits
// out a load per split: at batch 1 with 264 splits that chain is the longest part of the merge.
constexpr int kMergeColumns = 32;
constexpr int kMergeGroups = kThreads / kMergeColumns;

template <typename T>
__global__ void __launch_bounds__(kThreads) merge_by_columns_kernel(const MlaUnfusedParams p) {
  extern __shared__ float weight[];  // [splits]
  __shared__ float scratch[32];
  __shared__ float group_sum[kMergeGroups][kMergeColumns];
  const int64_t bh = blockIdx.x;
  const int column = threadIdx.x % kMergeColumns, group = threadIdx.x / kMergeColumns;
  const int j = blockIdx.y * kMergeColumns + column;
  const float denom = split_weights(p, bh, weight, scratch);
  const int per_group = (p.splits + kMergeGroups - 1) / kMergeGroups;
  const int first = min(p.splits, group * per_group), end = min(p.splits, first + per_group);
  float acc = 0.f;
  if (j < p.rank) {
#pragma unroll 4
    for (int s = first; s < end; ++s) acc += p.partial_o[(bh * p.splits + s) * p.rank + j] * weight[s];
  }
  group_sum[group][column] = acc;
  __syncthreads();
  if (group == 0 && j < p.rank) {
    float sum = 0.f;
#pragma unroll
    for (int g = 0; g < kMergeGroups; ++g) sum += group_sum[g][column];
    static_cast<T*>(p.o_lat)[bh * p.rank + j] = cl::from_f32<T>(denom > 0.f ? sum / denom : 0.f);
  }
}

template <typename T>
void launch_merge(const MlaUnfusedParams& p, cudaStream_t s) {
  if (p.merge_by_columns) {
    // Eight spare weights: an unrolled loop's machine code may read a group ahead of its exit
    // test (the split-KV merge's fault of 2155d3c, docs/RELIABILITY.md).
    const dim3 grid(unsigned(p.batch * p.num_heads), unsigned((p.rank + kMergeColumns - 1) / kMergeColumns));
    merge_by_columns_kernel<T><<<grid, kThreads, size_t(p.splits + 8) * 4, s>>>(p);
  } else {
    merge_kernel<T><<<unsigned(p.batch * p.num_heads), kThreads, size_t(p.splits) * 4, s>>>(p);
  }
}

// o_heads[b][h][i] = sum_j W_UV_h[i][j] o_lat[b][h][j]: a warp a row i of a head, for a chunk
// of sequences; grid (heads * Dv / kWarps rounded up, batch chunks).
template <typename T>
__global__ void __launch_bounds__(kThreads) value_up_kernel(const MlaUnfusedParams p) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= p.num_heads * p.v_dim) return;
  const int h = row / p.v_dim, i = row % p.v_dim, b0 = blockIdx.y * kBatchChunk;
  const int nb = min(kBatchChunk, p.batch - b0);
  const T* w = static_cast<const T*>(p.wkv_b) + (int64_t(h) * (p.nope + p.v_dim) + p.nope + i) * p.rank;
  float acc[kBatchChunk] = {};
#pragma unroll 4
  for (int j = lane; j < p.rank; j += 32) {
    const float wf = cl::to_f32(w[j]);
#pragma unroll
    for (int b = 0; b < kBatchChunk; ++b)
      if (b < nb)
        acc[b] += wf * cl::to_f32(static_cast<const T*>(p.o_lat)[(int64_t(b0 + b) * p.num_heads + h) * p.rank + j]);
  }
#pragma unroll
  for (int b = 0; b < kBatchChunk; ++b) {
    const float sum = warp_sum(acc[b]);
    if (lane == 0 && b < nb)
      static_cast<T*>(p.o_heads)[(int64_t(b0 + b) * p.num_heads + h) * p.v_dim + i] = cl::from_f32<T>(sum);
  }
}

template <template <typename> class Kernel>
void launch(const MlaUnfusedParams& p, dim3 grid, size_t smem, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.element == Element::kBF16) Kernel<__nv_bfloat16>::launch(p, grid, smem, s);
  else Kernel<__half>::launch(p, grid, smem, s);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// Launchers of each kernel template for launch<>.
template <typename T>
struct LatentAppend {
  static void launch(const MlaUnfusedParams& p, dim3 g, size_t, cudaStream_t s) {
    latent_append_kernel<T><<<g, kThreads, 0, s>>>(p);
  }
};
template <typename T>
struct Absorb {
  static void launch(const MlaUnfusedParams& p, dim3 g, size_t, cudaStream_t s) {
    absorb_kernel<T><<<g, kThreads, 0, s>>>(p);
  }
};
template <typename T>
struct SplitAttention {
  static void launch(const MlaUnfusedParams& p, dim3 g, size_t smem, cudaStream_t s) {
    split_attention_kernel<T><<<g, kThreads, smem, s>>>(p);
    launch_merge<T>(p, s);
  }
};
// The tensor-core form (mla_attention_mma.cuh): 16 heads a CTA, grid z the head groups. Its
// shared memory is above the default 48 KB (opted into at each launch, as the fused kernels do).
template <typename T>
struct SplitAttentionMma {
  static void launch(const MlaUnfusedParams& p, dim3 g, size_t, cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(mla_mma::split_attention_mma_kernel<T>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            mla_mma::kSmemBytes));
    const dim3 grid(g.x, g.y, unsigned(mla_attention_mma_head_groups(p.num_heads)));
    mla_mma::split_attention_mma_kernel<T><<<grid, mla_mma::kThreads, mla_mma::kSmemBytes, s>>>(p);
    launch_merge<T>(p, s);
  }
};
template <typename T>
struct ValueUp {
  static void launch(const MlaUnfusedParams& p, dim3 g, size_t, cudaStream_t s) {
    value_up_kernel<T><<<g, kThreads, 0, s>>>(p);
  }
};

unsigned batch_chunks(const MlaUnfusedParams& p) {
  return unsigned((p.batch + kBatchChunk - 1) / kBatchChunk);
}

}  // namespace

void launch_mla_latent_append(const MlaUnfusedParams& p, void* stream) {
  launch<LatentAppend>(p, dim3(unsigned(p.batch)), 0, stream);
}

void launch_mla_absorb(const MlaUnfusedParams& p, void* stream) {
  launch<Absorb>(p, dim3(unsigned(p.num_heads), unsigned((p.rank + kThreads - 1) / kThreads), batch_chunks(p)),
                 0, stream);
}

bool mla_attention_takes_tensor_cores(int rank, int rope) {
  return rank == mla_mma::kRank && rope == mla_mma::kRope;
}

int mla_attention_mma_head_groups(int num_heads) {
  return (num_heads + mla_mma::kHeads - 1) / mla_mma::kHeads;
}

int mla_attention_mma_ctas_per_sm() {
  auto* kernel = mla_mma::split_attention_mma_kernel<__nv_bfloat16>;  // f16's: the same resources
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          mla_mma::kSmemBytes));
  int ctas = 0;
  TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, mla_mma::kThreads,
                                                                   mla_mma::kSmemBytes));
  return std::max(ctas, 1);
}

void launch_mla_split_attention(const MlaUnfusedParams& p, void* stream) {
  const dim3 grid(unsigned(p.splits), unsigned(p.batch));
  if (p.tensor_cores) {
    TESSERA_CHECK(mla_attention_takes_tensor_cores(p.rank, p.rope), ErrorCode::kInternal,
                  "MLA attention on tensor cores planned for kv_lora_rank = ", p.rank,
                  ", rope_head_dim = ", p.rope, ": it takes 512 and 64");
    launch<SplitAttentionMma>(p, grid, 0, stream);
    return;
  }
  const size_t smem = size_t(kMlaTileRows) * (p.rank + p.rope) * 2;  // 2-byte elements
  launch<SplitAttention>(p, grid, smem, stream);
}

void launch_mla_value_up(const MlaUnfusedParams& p, void* stream) {
  launch<ValueUp>(p, dim3(unsigned((p.num_heads * p.v_dim + kWarps - 1) / kWarps), batch_chunks(p)),
                  0, stream);
}

}  // namespace tessera::decode::kernels
