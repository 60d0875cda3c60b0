// The unfused decode kernels of unfused_launch.h.
//
// split-KV attention: grid (splits, Hkv, B); CTA (s, g, b) takes the tokens [s * chunk,
// (s + 1) * chunk) of [0, p_b] (the new token is already in the cache) for the G query heads of
// KV head g and writes the split's (o, lse) to the workspace. At head dimensions 64 and 128 the
// TMA-fed kernel of split_kv_tma.cuh where the cache's 16-token blocks are contiguous rows (its
// splits whole 32-token tiles), else the cp.async tensor-core kernel of split_kv_mma.cuh; at
// 256 split_kv_kernel below: keys and values arrive in shared memory 32 tokens at a time
// (cp.async, double-buffered), a warp takes 8 tokens of each, four lanes a token for the scores,
// an online softmax in the log2 domain, then a lane per D/32 dimensions for the values; the
// warps merge in order. merge_splits adds the splits of each
// (b, h) in split order (deterministic).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cluster/cluster_collectives.cuh"
#include "common/smem_limit.h"
#include "decode/decode_device.cuh"
#include "decode/split_kv_mma.cuh"
#include "decode/split_kv_tma_launch.h"
#include "decode/unfused_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels {
namespace {

namespace cl = tessera::cluster;

// N consecutive elements (N * sizeof(T) of 4, 8 or 16 bytes, aligned to it) as floats.
template <typename T, int N>
__device__ inline void load_n(const T* src, float (&f)[N]) {
  static_assert(N * sizeof(T) == 4 || N * sizeof(T) == 8 || N * sizeof(T) == 16);
  using Raw = std::conditional_t<N * sizeof(T) == 16, uint4,
                                 std::conditional_t<N * sizeof(T) == 8, uint2, uint32_t>>;
  const Raw raw = *reinterpret_cast<const Raw*>(src);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < N; ++i) f[i] = cl::to_f32(e[i]);
}

template <typename T>
__device__ const T* cache_row(const UnfusedDecodeParams& p, const void* cache, int b, int64_t t,
                              int kv_head) {
  const int64_t row = cache_row_of(p, b, t);
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
    const float normed =
        p.input_norm ? cl::to_f32(cl::from_f32<T>(cl::to_f32(x[i]) * rstd)) : cl::to_f32(x[i]);
    xn[i] = cl::from_f32<T>(normed * g);
  }
}

template <typename T>
__global__ void __launch_bounds__(128) rope_append_kernel(UnfusedDecodeParams p) {
  const int b = blockIdx.y, head = blockIdx.x;  // heads: Hq query heads, then Hkv key heads
  const int d2 = p.head_dim / 2, pos = p.positions[b];
  const bool is_q = head < p.num_heads;
  T* row =
      is_q ? static_cast<T*>(p.q) + (int64_t(b) * p.num_heads + head) * p.head_dim
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

// The split-KV kernel's geometry: the CTA's keys and values stream into shared memory kTile
// tokens at a time through cp.async, double-buffered (the next tile's loads in flight while one
// is computed). 32-token tiles in two stages (32 KB at D 128) leave room for six CTAs a
// multiprocessor: on H100 that measured 1.34x the earlier kernel (a warp's own 32 tokens read
// straight from global memory) at batch 16, context 4096, and 1.07x on steps of 1536 decodes at
// context 256, where 64-token tiles in three stages (two CTAs a multiprocessor) lost 12%.
// Each warp takes kWarpTokens tokens of a tile, kParts lanes a token for the scores; rows of
// 16-byte chunks, chunk c of row r stored at c ^ (r % 8), so the eight lanes of a shared-memory
// phase (eight rows, one chunk each) hit eight bank groups.
template <typename T, int D>
struct SplitKvTiles {
  static constexpr int kWarps = 4;
  static constexpr int kTile = 32;
  static constexpr int kStages = 2;
  static constexpr int kChunks = D / 8;  // 16-byte chunks a row
  static constexpr int kWarpTokens = kTile / kWarps;
  static constexpr int kParts = 32 / kWarpTokens;
  static constexpr int kPartChunks = kChunks / kParts;
  static constexpr int kTileChunks = kTile * kChunks;  // of K, and as many of V
  static constexpr size_t kSmemBytes = size_t(kStages) * 2 * kTileChunks * 16;
  static_assert(kWarpTokens >= 8 && kChunks >= 8 && kChunks % kParts == 0);
  __device__ static int swizzled(int row, int chunk) { return row * kChunks + (chunk ^ (row & 7)); }
};

// 16 bytes global -> shared, asynchronously; zeros where !valid (src must still be mapped).
__device__ inline void cp_async16_zfill(void* dst, const void* src, bool valid) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

template <typename T, int D, int kGroupMax>
__global__ void __launch_bounds__(128) split_kv_kernel(UnfusedDecodeParams p) {
  using G = SplitKvTiles<T, D>;
  constexpr int kWarps = G::kWarps, kDims = D / 32;  // value dimensions per lane
  extern __shared__ uint4 tiles_s[];                 // [kStages][K, V][kTileChunks]
  __shared__ float q_s[kGroupMax][D];
  __shared__ float acc[kGroupMax][D];  // the warps' outputs, added in warp order
  __shared__ float warp_ml[kWarps][kGroupMax][2];
  __shared__ float p_s[kWarps][kGroupMax][G::kWarpTokens];  // a tile's softmax weights
  const int split = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t context = int64_t(p.positions[b]) + 1;
  const int64_t chunk = (context + p.splits - 1) / p.splits;
  const int64_t begin = split * chunk, end = min(context, begin + chunk);
  const int tiles = end > begin ? int((end - begin + G::kTile - 1) / G::kTile) : 0;
  // Tile i's keys and values into stage `stage` (rows past `end` zero-filled).
  auto load = [&](int i, int stage) {
    uint4* k_s = tiles_s + size_t(stage) * 2 * G::kTileChunks;
    uint4* v_s = k_s + G::kTileChunks;
    for (int c = threadIdx.x; c < G::kTileChunks; c += blockDim.x) {
      const int row = c / G::kChunks, col = c % G::kChunks;
      const int64_t t = begin + int64_t(i) * G::kTile + row;
      const bool valid = t < end;
      const T* k_row = cache_row<T>(p, p.k_cache, b, valid ? t : begin, kv_head);
      const T* v_row =
          static_cast<const T*>(p.v_cache) + (k_row - static_cast<const T*>(p.k_cache));
      cp_async16_zfill(k_s + G::swizzled(row, col), k_row + col * 8, valid);
      cp_async16_zfill(v_s + G::swizzled(row, col), v_row + col * 8, valid);
    }
  };
#pragma unroll
  for (int i = 0; i < G::kStages - 1; ++i) {
    if (i < tiles) load(i, i);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  const float scale = p.softmax_scale * 1.4426950408889634f;
  const int64_t q_stride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_heads) * D;
  const T* q = static_cast<const T*>(p.q) + b * q_stride + int64_t(kv_head) * group * D;
  for (int i = threadIdx.x; i < kGroupMax * D; i += blockDim.x)
    q_s[i / D][i % D] = i / D < group ? cl::to_f32(q[i]) * scale : 0.f;
  float m[kGroupMax], l[kGroupMax], o[kGroupMax][kDims];
#pragma unroll
  for (int h = 0; h < kGroupMax; ++h) {
    m[h] = kNoKey;
    l[h] = 0.f;
#pragma unroll
    for (int e = 0; e < kDims; ++e) o[h][e] = 0.f;
  }
  const int token = lane % G::kWarpTokens, part = lane / G::kWarpTokens;
  const int row = warp * G::kWarpTokens + token;  // this lane's row of a tile (scores)
  for (int i = 0; i < tiles; ++i) {
    // Tile i landed (this thread's copies, then everyone's), and every warp is done with tile
    // i - 1, whose stage the load of tile i + kStages - 1 reuses.
    asm volatile("cp.async.wait_group %0;\n" ::"n"(G::kStages - 2) : "memory");
    __syncthreads();
    if (i + G::kStages - 1 < tiles) load(i + G::kStages - 1, (i + G::kStages - 1) % G::kStages);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    const uint4* k_s = tiles_s + size_t(i % G::kStages) * 2 * G::kTileChunks;
    const uint4* v_s = k_s + G::kTileChunks;
    const bool valid = begin + int64_t(i) * G::kTile + row < end;
    float s[kGroupMax];
#pragma unroll
    for (int h = 0; h < kGroupMax; ++h) s[h] = 0.f;
#pragma unroll
    for (int pc = 0; pc < G::kPartChunks; ++pc) {
      const int c = part * G::kPartChunks + pc;
      const uint4 raw = k_s[G::swizzled(row, c)];
      const T* e8 = reinterpret_cast<const T*>(&raw);
      float k[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) k[e] = cl::to_f32(e8[e]);
#pragma unroll
      for (int h = 0; h < kGroupMax; ++h) {
        if (h >= group) break;
        const float4 q0 = *reinterpret_cast<const float4*>(&q_s[h][c * 8]);
        const float4 q1 = *reinterpret_cast<const float4*>(&q_s[h][c * 8 + 4]);
        s[h] = fmaf(q0.x, k[0], s[h]);
        s[h] = fmaf(q0.y, k[1], s[h]);
        s[h] = fmaf(q0.z, k[2], s[h]);
        s[h] = fmaf(q0.w, k[3], s[h]);
        s[h] = fmaf(q1.x, k[4], s[h]);
        s[h] = fmaf(q1.y, k[5], s[h]);
        s[h] = fmaf(q1.z, k[6], s[h]);
        s[h] = fmaf(q1.w, k[7], s[h]);
      }
    }
    // The parts of a token's score summed (the same order in every lane of the token), then an
    // online softmax over the warp's tokens, per head.
#pragma unroll
    for (int h = 0; h < kGroupMax; ++h) {
      if (h >= group) break;
#pragma unroll
      for (int off = G::kWarpTokens; off < 32; off *= 2)
        s[h] += __shfl_xor_sync(0xffffffffu, s[h], off);
      float tile_max = valid ? s[h] : kNoKey;
#pragma unroll
      for (int off = G::kWarpTokens / 2; off > 0; off /= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
      const float m_new = fmaxf(m[h], tile_max), f = rescale(m[h], m_new);
      const float pr = valid ? exp2f(s[h] - m_new) : 0.f;
      float sum = pr;
#pragma unroll
      for (int off = G::kWarpTokens / 2; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
      l[h] = l[h] * f + sum;
      m[h] = m_new;
#pragma unroll
      for (int e = 0; e < kDims; ++e) o[h][e] *= f;
      if (part == 0) p_s[warp][h][token] = pr;
    }
    __syncwarp();
    // Values: each of the warp's rows, this lane's kDims dimensions.
    const int v_chunk = lane * kDims / 8, v_within = lane * kDims % 8;
#pragma unroll 4
    for (int j = 0; j < G::kWarpTokens; ++j) {
      const int r = warp * G::kWarpTokens + j;
      float v[kDims];
      load_n<T, kDims>(reinterpret_cast<const T*>(v_s + G::swizzled(r, v_chunk)) + v_within, v);
#pragma unroll
      for (int h = 0; h < kGroupMax; ++h) {
        if (h >= group) break;
        const float w = p_s[warp][h][j];
#pragma unroll
        for (int e = 0; e < kDims; ++e) o[h][e] = fmaf(w, v[e], o[h][e]);
      }
    }
    __syncwarp();
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < kGroupMax; ++h) {
      warp_ml[warp][h][0] = m[h];
      warp_ml[warp][h][1] = l[h];
    }
  }
  __syncthreads();
  // The warps in order (deterministic): the common max, each warp's rescaled output added.
  float mm[kGroupMax], ll[kGroupMax];
#pragma unroll
  for (int h = 0; h < kGroupMax; ++h) {
    mm[h] = kNoKey;
    for (int w = 0; w < kWarps; ++w) mm[h] = fmaxf(mm[h], warp_ml[w][h][0]);
    ll[h] = 0.f;
    for (int w = 0; w < kWarps; ++w) ll[h] += warp_ml[w][h][1] * rescale(warp_ml[w][h][0], mm[h]);
  }
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int h = 0; h < kGroupMax; ++h) {
        if (h >= group) break;
        const float f = rescale(m[h], mm[h]);
#pragma unroll
        for (int e = 0; e < kDims; ++e) {
          const int d = lane * kDims + e;
          acc[h][d] = (w == 0 ? 0.f : acc[h][d]) + o[h][e] * f;
        }
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < group * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    const int64_t bh = int64_t(b) * p.num_heads + kv_head * group + h;
    p.partial_o[(bh * p.splits + split) * D + d] = ll[h] > 0.f ? acc[h][d] / ll[h] : 0.f;
    if (d == 0) p.partial_lse[bh * p.splits + split] = ll[h] > 0.f ? mm[h] + log2f(ll[h]) : kNoKey;
  }
}

// o[b, h] = sum over splits of o_s * 2^(lse_s - lse), lse = log2 sum 2^lse_s, in split order.
// A warp a (b, h), a lane D / 32 columns: the lanes read the splits' lse and reduce their
// maximum and sum by shuffles, and each split's weight reaches every lane by a shuffle from the
// lane that read it. The partial rows arrive 16 splits at a time, the first batch issued before
// the weights are known (at 32 splits: 2.3 us against 4.3 for a CTA a row whose one thread
// turned the lse values into weights, H200).
template <typename T, int D>
__global__ void __launch_bounds__(64) merge_splits_kernel(UnfusedDecodeParams p) {
  // kBatch divides 32, so a batch's weights are held by one group of 32 lanes.
  constexpr int kCols = D / 32, kBatch = 16;
  const int64_t bh = int64_t(blockIdx.x) * 2 + threadIdx.x / 32;
  if (bh >= int64_t(p.batch) * p.num_heads) return;
  const int lane = threadIdx.x % 32, splits = p.splits;
  const float* lse = p.partial_lse + bh * splits;
  const float* partial = p.partial_o + bh * splits * D + lane * kCols;
  float v[kBatch][kCols];
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (s0 + u >= splits) break;
#pragma unroll
      for (int q = 0; q < kCols; q += 2) {
        const float2 x = *reinterpret_cast<const float2*>(partial + int64_t(s0 + u) * D + q);
        v[u][q] = x.x;
        v[u][q + 1] = x.y;
      }
    }
  };
  load_batch(0);
  float mx = kNoKey;
  for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, lse[s]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float denom = 0;
  for (int s = lane; s < splits; s += 32) denom += rescale(lse[s], mx);
  denom = warp_sum(denom);
  float acc[kCols] = {};
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    if (s0 > 0) load_batch(s0);
    const int mine = s0 / 32 * 32 + lane;  // the split whose weight this lane holds
    const float w_lane = mine < splits ? rescale(lse[mine], mx) : 0.f;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float w = __shfl_sync(0xffffffffu, w_lane, (s0 + u) % 32);
      if (s0 + u >= splits) break;
#pragma unroll
      for (int q = 0; q < kCols; ++q) acc[q] = fmaf(w, v[u][q], acc[q]);
    }
  }
  T* out = static_cast<T*>(p.o) + bh * D + lane * kCols;
#pragma unroll
  for (int q = 0; q < kCols; ++q) out[q] = cl::from_f32<T>(denom > 0.f ? acc[q] / denom : 0.f);
}

// The split-KV kernel for (T, head_dim, group) with its block size and dynamic shared memory,
// the shared-memory limit raised once per device.
struct SplitKvLaunch {
  void (*kernel)(UnfusedDecodeParams) = nullptr;
  int threads = 0;
  size_t smem = 0;
};

template <typename Kernel>
SplitKvLaunch prepared(Kernel kernel, int threads, size_t smem, std::atomic<uint64_t>& raised) {
  ::tessera::kernels::raise_smem_limit_once(kernel, int(smem), raised);
  return {kernel, threads, smem};
}

// The tensor-core kernel: four warps, two 64-token buffers (measured on an H200 against eight
// warps and three buffers: docs/PERF.md, "Split-KV decode on tensor cores").
template <typename T, int D, int kN>
SplitKvLaunch mma_launch() {
  using G = split_kv_mma::Geometry<T, D, 4, 2>;
  static std::atomic<uint64_t> raised{0};
  return prepared(split_kv_mma::split_kv_mma_kernel<T, D, kN, 4, 2>, G::kThreads, G::kSmemBytes,
                  raised);
}

template <typename T, int D, int kGroupMax>
SplitKvLaunch cuda_core_launch() {
  static std::atomic<uint64_t> raised{0};
  return prepared(split_kv_kernel<T, D, kGroupMax>, 128, SplitKvTiles<T, D>::kSmemBytes, raised);
}

template <typename T>
SplitKvLaunch split_kv_launch(int head_dim, int group) {
  const bool one_tile = split_kv_warp::head_tiles(group) == 1;
  if (head_dim == 64) return one_tile ? mma_launch<T, 64, 1>() : mma_launch<T, 64, 2>();
  if (head_dim == 128) return one_tile ? mma_launch<T, 128, 1>() : mma_launch<T, 128, 2>();
  return group <= 4 ? cuda_core_launch<T, 256, 4>() : cuda_core_launch<T, 256, 16>();
}

SplitKvLaunch split_kv_launch(Element element, int head_dim, int group) {
  return element == Element::kBF16 ? split_kv_launch<__nv_bfloat16>(head_dim, group)
                                   : split_kv_launch<__half>(head_dim, group);
}

template <typename T>
void launch_merge(const UnfusedDecodeParams& p, cudaStream_t s) {
  const unsigned grid = unsigned((int64_t(p.batch) * p.num_heads + 1) / 2);
  switch (p.head_dim) {
    case 64: merge_splits_kernel<T, 64><<<grid, 64, 0, s>>>(p); break;
    case 128: merge_splits_kernel<T, 128><<<grid, 64, 0, s>>>(p); break;
    default: merge_splits_kernel<T, 256><<<grid, 64, 0, s>>>(p); break;
  }
}

}  // namespace

bool unfused_decode_supported(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 && group <= 16;
}

void launch_rmsnorm(const UnfusedDecodeParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.element == Element::kBF16)
    rmsnorm_kernel<__nv_bfloat16><<<p.batch, 256, 0, s>>>(p);
  else
    rmsnorm_kernel<__half><<<p.batch, 256, 0, s>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_rope_append(const UnfusedDecodeParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(p.num_heads + p.num_kv_heads, p.batch);
  if (p.element == Element::kBF16)
    rope_append_kernel<__nv_bfloat16><<<grid, 128, 0, s>>>(p);
  else
    rope_append_kernel<__half><<<grid, 128, 0, s>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_split_kv_attention(const UnfusedDecodeParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (!launch_split_kv_tma(p, s)) {
    const SplitKvLaunch l = split_kv_launch(p.element, p.head_dim, p.num_heads / p.num_kv_heads);
    l.kernel<<<dim3(p.splits, p.num_kv_heads, p.batch), l.threads, l.smem, s>>>(p);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
  if (p.element == Element::kBF16)
    launch_merge<__nv_bfloat16>(p, s);
  else
    launch_merge<__half>(p, s);
  TESSERA_CUDA_CHECK_LAUNCH();
}

int split_kv_ctas_per_multiprocessor(Element element, int head_dim, int group) {
  if (const int pipes = split_kv_tma_pipes(head_dim, group); pipes > 0) return pipes;
  const SplitKvLaunch l = split_kv_launch(element, head_dim, group);
  int ctas = 0;
  TESSERA_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, l.kernel, l.threads, l.smem));
  return ctas;
}

}  // namespace tessera::decode::kernels
