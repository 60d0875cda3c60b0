// The unfused decode kernels of unfused_launch.h.
//
// split_kv_attention: grid (splits, Hkv, B), 4 warps. CTA (s, g, b) takes the tokens
// [s * chunk, (s + 1) * chunk) of [0, p_b] (the new token is already in the cache) for the G
// query heads of KV head g. A half-warp takes one token at a time, each lane 8 dims (D = 128;
// D = 64: 8 lanes, D = 256: 32 lanes), with an online softmax in the log2 domain; the warps
// merge in order, then the split's (o, lse) go to the workspace. merge_splits adds the splits
// of each (b, h) in split order (deterministic).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cluster/cluster_collectives.cuh"
#include "decode/unfused_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels {
namespace {

namespace cl = tessera::cluster;
constexpr float kNegInf = -__builtin_huge_valf();

__device__ inline float rescale(float m, float m_max) {
  return m == kNegInf ? 0.f : exp2f(m - m_max);
}

template <typename T>
__device__ inline void load8(const T* src, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = cl::to_f32(e[i]);
}

template <typename T>
__device__ const T* cache_row(const UnfusedDecodeParams& p, const void* cache, int b, int64_t t,
                              int kv_head) {
  int64_t row;
  if (p.page_table != nullptr) {
    // Positions fit in 32 bits; a power-of-two page size (the usual 16) needs no division.
    const int pos = int(t), page_size = int(p.page_size);
    const bool pow2 = (page_size & (page_size - 1)) == 0;
    const int slot = pow2 ? pos >> (__ffs(page_size) - 1) : pos / page_size;
    const int offset = pow2 ? pos & (page_size - 1) : pos % page_size;
    const int32_t page = p.page_table[b * p.pages_per_seq + slot];
    if (page < 0 || page >= p.num_pages) {
      printf("tessera decode: page_table[%d][%d] = %d is outside [0, %lld)\n", b, slot, page,
             static_cast<long long>(p.num_pages));
      __trap();
    }
    row = int64_t{page} * page_size + offset;
  } else {
    row = int64_t{b} * p.context_stride + t;
  }
  return static_cast<const T*>(cache) + (row * p.num_kv_heads + kv_head) * p.head_dim;
}

template <typename T>
__global__ void __launch_bounds__(256) rmsnorm_kernel(UnfusedDecodeParams p) {
  __shared__ float scratch[32];
  const int b = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + int64_t(b) * p.hidden;
  T* xn = static_cast<T*>(p.xn) + int64_t(b) * p.hidden;
  float sq = 0;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    const float v = cl::to_f32(x[i]);
    sq += v * v;
  }
  const float total = cl::block_reduce(sq, cl::SumOp{}, scratch);
  const float rstd = p.input_norm ? rsqrtf(total / p.hidden + p.rms_eps) : 1.f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    const float g = p.input_norm ? cl::to_f32(static_cast<const T*>(p.input_norm)[i]) : 1.f;
    // Normalize in f32, round, then scale by the weight (Hugging Face's LlamaRMSNorm order).
    const float normed = p.input_norm ? cl::to_f32(cl::from_f32<T>(cl::to_f32(x[i]) * rstd)) : cl::to_f32(x[i]);
    xn[i] = cl::from_f32<T>(normed * g);
  }
}

template <typename T>
__global__ void __launch_bounds__(128) rope_append_kernel(UnfusedDecodeParams p) {
  const int b = blockIdx.y, head = blockIdx.x;  // heads: Hq query heads, then Hkv key heads
  const int d2 = p.head_dim / 2, pos = p.positions[b];
  const bool is_q = head < p.num_heads;
  T* row = is_q ? static_cast<T*>(p.q) + (int64_t(b) * p.num_heads + head) * p.head_dim
                : static_cast<T*>(p.k) + (int64_t(b) * p.num_kv_heads + head - p.num_heads) * p.head_dim;
  for (int i = threadIdx.x; i < d2; i += blockDim.x) {
    float sn, cs;
    sincosf(float(pos) * p.inv_freq[i], &sn, &cs);
    const float x0 = cl::to_f32(row[i]), x1 = cl::to_f32(row[i + d2]);
    row[i] = cl::from_f32<T>(x0 * cs - x1 * sn);
    row[i + d2] = cl::from_f32<T>(x1 * cs + x0 * sn);
  }
  if (is_q) return;
  __syncthreads();
  const int g = head - p.num_heads;
  const T* v = static_cast<const T*>(p.v) + (int64_t(b) * p.num_kv_heads + g) * p.head_dim;
  T* k_dst = const_cast<T*>(cache_row<T>(p, p.k_cache, b, pos, g));
  T* v_dst = const_cast<T*>(cache_row<T>(p, p.v_cache, b, pos, g));
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    k_dst[i] = row[i];
    v_dst[i] = v[i];
  }
}

// kLanes lanes per token (kLanes * 8 = D); kGroupMax query heads at most per KV head.
template <typename T, int kLanes, int kGroupMax>
__global__ void __launch_bounds__(128) split_kv_kernel(UnfusedDecodeParams p) {
  constexpr int kWarps = 4, kTokensPerWarpStep = 32 / kLanes;
  constexpr int D = kLanes * 8;
  __shared__ float warp_o[kWarps][kGroupMax][D];
  __shared__ float warp_ml[kWarps][kGroupMax][2];
  const int split = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, sub = lane / kLanes, part = lane % kLanes;
  const int64_t context = int64_t(p.positions[b]) + 1;
  const int64_t chunk = (context + p.splits - 1) / p.splits;
  const int64_t begin = split * chunk, end = min(context, begin + chunk);
  const float scale = p.softmax_scale * 1.4426950408889634f;
  float q[kGroupMax][8], o[kGroupMax][8], m[kGroupMax], l[kGroupMax];
#pragma unroll
  for (int h = 0; h < kGroupMax; ++h) {
    m[h] = kNegInf;
    l[h] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[h][e] = q[h][e] = 0.f;
    if (h < group) {
      const int64_t q_stride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_heads) * D;
      load8(static_cast<const T*>(p.q) + b * q_stride + (kv_head * group + h) * D + part * 8, q[h]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[h][e] *= scale;
    }
  }
  // kSteps warp steps' keys and values are loaded before any is used (more loads in flight
  // against the cache's latency); they are folded in the same order as one step at a time.
  constexpr int kSteps = kGroupMax <= 4 ? 4 : 1, kStride = kWarps * kTokensPerWarpStep;  // registers
  for (int64_t t0 = begin + warp * kTokensPerWarpStep; t0 < end; t0 += kStride * kSteps) {
    float k[kSteps][8] = {}, v[kSteps][8] = {};
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const int64_t t = t0 + i * kStride + sub;
      if (t < end) {
        load8(cache_row<T>(p, p.k_cache, b, t, kv_head) + part * 8, k[i]);
        load8(cache_row<T>(p, p.v_cache, b, t, kv_head) + part * 8, v[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      if (t0 + i * kStride >= end) break;  // the same for every lane of the warp
      const bool valid = t0 + i * kStride + sub < end;
#pragma unroll
      for (int h = 0; h < kGroupMax; ++h) {
        if (h >= group) break;
        float s = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) s += q[h][e] * k[i][e];
#pragma unroll
        for (int off = kLanes / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (!valid) continue;
        const float m_new = fmaxf(m[h], s), f = rescale(m[h], m_new), pr = exp2f(s - m_new);
        l[h] = l[h] * f + pr;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[h][e] = o[h][e] * f + pr * v[i][e];
        m[h] = m_new;
      }
    }
  }
  // Merge the token groups of a warp (same dims, other tokens), lowest first.
#pragma unroll
  for (int h = 0; h < kGroupMax; ++h) {
    if (h >= group) break;
    for (int off = kLanes; off < 32; off *= 2) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[h], off), l_o = __shfl_xor_sync(0xffffffffu, l[h], off);
      const float m_new = fmaxf(m[h], m_o);
      const bool low = (lane & off) == 0;
      const float f_lo = low ? rescale(m[h], m_new) : rescale(m_o, m_new);
      const float f_hi = low ? rescale(m_o, m_new) : rescale(m[h], m_new);
      const float l_lo = low ? l[h] : l_o, l_hi = low ? l_o : l[h];
      l[h] = l_lo * f_lo + l_hi * f_hi;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float o_o = __shfl_xor_sync(0xffffffffu, o[h][e], off);
        const float o_lo = low ? o[h][e] : o_o, o_hi = low ? o_o : o[h][e];
        o[h][e] = o_lo * f_lo + o_hi * f_hi;
      }
      m[h] = m_new;
    }
    if (lane < kLanes) {
#pragma unroll
      for (int e = 0; e < 8; ++e) warp_o[warp][h][part * 8 + e] = o[h][e];
    }
    if (lane == 0) {
      warp_ml[warp][h][0] = m[h];
      warp_ml[warp][h][1] = l[h];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float mm = kNegInf;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, warp_ml[w][h][0]);
    float ll = 0, oo = 0;
    for (int w = 0; w < kWarps; ++w) {
      const float f = rescale(warp_ml[w][h][0], mm);
      ll += warp_ml[w][h][1] * f;
      oo += warp_o[w][h][d] * f;
    }
    const int64_t bh = int64_t(b) * p.num_heads + kv_head * group + h;
    p.partial_o[(bh * p.splits + split) * D + d] = ll > 0.f ? oo / ll : 0.f;
    if (d == 0) p.partial_lse[bh * p.splits + split] = ll > 0.f ? mm + log2f(ll) : kNegInf;
  }
}

// o[b, h] = sum over splits of o_s * 2^(lse_s - lse), lse = log2 sum 2^lse_s; in split order.
template <typename T>
__global__ void __launch_bounds__(128) merge_splits_kernel(UnfusedDecodeParams p) {
  const int64_t bh = blockIdx.x;
  const int D = p.head_dim;
  float mx = kNegInf;
  for (int s = 0; s < p.splits; ++s) mx = fmaxf(mx, p.partial_lse[bh * p.splits + s]);
  float denom = 0;
  for (int s = 0; s < p.splits; ++s) denom += rescale(p.partial_lse[bh * p.splits + s], mx);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int s = 0; s < p.splits; ++s)
      acc += rescale(p.partial_lse[bh * p.splits + s], mx) * p.partial_o[(bh * p.splits + s) * D + d];
    static_cast<T*>(p.o)[bh * D + d] = cl::from_f32<T>(denom > 0.f ? acc / denom : 0.f);
  }
}

template <typename T>
void launch_attention_typed(const UnfusedDecodeParams& p, cudaStream_t s) {
  const dim3 grid(p.splits, p.num_kv_heads, p.batch);
  const int group = p.num_heads / p.num_kv_heads;
  switch (p.head_dim) {
    case 64: group <= 4 ? split_kv_kernel<T, 8, 4><<<grid, 128, 0, s>>>(p)
                        : split_kv_kernel<T, 8, 16><<<grid, 128, 0, s>>>(p); break;
    case 128: group <= 4 ? split_kv_kernel<T, 16, 4><<<grid, 128, 0, s>>>(p)
                         : split_kv_kernel<T, 16, 16><<<grid, 128, 0, s>>>(p); break;
    default: group <= 4 ? split_kv_kernel<T, 32, 4><<<grid, 128, 0, s>>>(p)
                        : split_kv_kernel<T, 32, 16><<<grid, 128, 0, s>>>(p); break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
  merge_splits_kernel<T><<<p.batch * p.num_heads, 128, 0, s>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool unfused_decode_supported(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 && group <= 16;
}

void launch_rmsnorm(const UnfusedDecodeParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.element == Element::kBF16) rmsnorm_kernel<__nv_bfloat16><<<p.batch, 256, 0, s>>>(p);
  else rmsnorm_kernel<__half><<<p.batch, 256, 0, s>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_rope_append(const UnfusedDecodeParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(p.num_heads + p.num_kv_heads, p.batch);
  if (p.element == Element::kBF16) rope_append_kernel<__nv_bfloat16><<<grid, 128, 0, s>>>(p);
  else rope_append_kernel<__half><<<grid, 128, 0, s>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_split_kv_attention(const UnfusedDecodeParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.element == Element::kBF16) launch_attention_typed<__nv_bfloat16>(p, s);
  else launch_attention_typed<__half>(p, s);
}

}  // namespace tessera::decode::kernels
