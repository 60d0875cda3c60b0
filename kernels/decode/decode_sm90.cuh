// Fused decode attention block (ClusterFusion's SplitToken dataflow) for Hopper: one
// thread-block cluster of N CTAs per KV head; RMSNorm, QKV projection, RoPE, KV-cache append,
// attention and output projection in one kernel; the sum over KV heads in a second one.
// attention_block.h states the math, src/decode/split_geometry.h the split.
//
// One CTA (8 warps) streams a "tape" of 16 KB tiles through a ring of kStages stages filled by
// TMA (one cp.async.bulk.tensor per weight tile, two per 16 cached tokens; completion counted
// in bytes on the stage's mbarrier), so memory stays busy across phase changes (the next
// phase's first tiles are in flight while the cluster reduces). Lanes of warp 0 issue; every
// warp waits on the stage's barrier:
//   QKV tiles   (G+2 row blocks of 128 rows) x (hidden/N / 64 columns): weights [128, 64] of
//               the cluster's q heads, k head, v head, plus x [batch tile, 64]
//   KV tiles    32 cached tokens of one sequence: K [32, D] and V [32, D]
//   Wo tiles    (hidden/N / 128 row blocks) x (G*D / 64 columns) of Wo [128, 64]
// Projections are m16n8k16 tensor-core MMAs: weights are the A operand (16 rows a warp), the
// batch is N (8 or 16 columns), so the weights are read once for the whole batch tile.
// Attention runs on CUDA cores: a half-warp per token, 8 dims a lane, online softmax in the
// log2 domain; warps merge at each sequence's end, the cluster merges with ClusterReduce.
//
// Shared memory: the stage ring, then the QKV partials (later the attention partials), q,
// the new K/V, per-warp attention partials, and the attention output (bf16) for Wo.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "cluster/cluster_collectives.cuh"
#include "decode/decode_launch.h"
#include "decode/split_geometry.h"

namespace tessera::decode::kernels::sm90 {

namespace cl = tessera::cluster;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 128;    // weight rows per tile (one head's projection)
constexpr int kTileCols = 64;     // weight columns per tile (128 bytes a row)
constexpr int kTokensPerTile = 32;
constexpr int kTileBytes = kTileRows * kTileCols * 2;  // = 2 * kTokensPerTile * kHeadDim * 2
static_assert(kTileBytes == 2 * kTokensPerTile * kHeadDim * 2);
constexpr int kTokensPerCopy = 16;  // cached tokens per TMA box (a page of the paged cache)

template <typename T, int kGroup, int kNTiles>
struct DecodeTraits {
  static constexpr int kBatchPad = 8 * kNTiles;  // the batch tile, as MMA columns
  static constexpr int kRowBlocks = kGroup + 2;  // q heads, k, v
  static constexpr int kWTileBytes = kTileBytes;  // a weight tile, 128-byte swizzled rows
  static constexpr int kXChunkBytes = kBatchPad * kTileCols * 2;
  static constexpr int kStageBytes = kWTileBytes + kXChunkBytes;
  static constexpr int kQkvFloats = kRowBlocks * kBatchPad * kHeadDim + kBatchPad;  // + sum sq
  static constexpr int kAttnFloats = kBatchPad * kGroup * (kHeadDim + 1);         // o, l
  static constexpr int kPartFloats = kQkvFloats > kAttnFloats ? kQkvFloats : kAttnFloats;
  static constexpr int kOStride = kGroup * kHeadDim + 8;  // bf16 row of o, padded (banks)
  // What is not the ring, then as many stages as fit (at most 8: 7 tiles, 112 KB, in flight).
  static constexpr int kFixedBytes =
      (kPartFloats * 4 + 15) / 16 * 16 +
      (kBatchPad * kGroup * kHeadDim * 4 > kBatchPad * (kGroup * kHeadDim + 8) * 2
           ? kBatchPad * kGroup * kHeadDim * 4 : kBatchPad * (kGroup * kHeadDim + 8) * 2) +
      kBatchPad * 2 * kHeadDim * 2 + kWarps * kGroup * (kHeadDim + 2) * 4 +
      3 * kBatchPad * kGroup * 4 + (kBatchPad + 1) * 4 + 12 + 64 * 4 + kMaxHiddenSlice * 2 + 8 * 8 +
      2048;
  static constexpr int kStagesFit = (227 * 1024 - kFixedBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit < 8 ? kStagesFit : 8;
  static_assert(kStages >= 3, "fused decode: too little shared memory for the stage ring");
  // Byte offsets.
  static constexpr int kRingOff = 0;
  static constexpr int kPartOff = kRingOff + kStages * kStageBytes;
  static constexpr int kQOff = kPartOff + (kPartFloats * 4 + 15) / 16 * 16;
  static constexpr int kQBytes = kBatchPad * kGroup * kHeadDim * 4;
  static constexpr int kOBytes = kBatchPad * kOStride * 2;  // aliases q (dead by then)
  static constexpr int kKvNewOff = kQOff + (kQBytes > kOBytes ? kQBytes : kOBytes);
  static constexpr int kWarpPartOff = kKvNewOff + kBatchPad * 2 * kHeadDim * 2;
  static constexpr int kWarpPartFloats = kWarps * kGroup * (kHeadDim + 2);
  static constexpr int kMOff = kWarpPartOff + kWarpPartFloats * 4;            // m [B][G]
  static constexpr int kMOwnOff = kMOff + kBatchPad * kGroup * 4;           // this CTA's m
  static constexpr int kSNewOff = kMOwnOff + kBatchPad * kGroup * 4;         // new-token scores
  static constexpr int kTileStartOff = kSNewOff + kBatchPad * kGroup * 4;    // int [B+1]
  static constexpr int kScratchOff = kTileStartOff + (kBatchPad + 1) * 4 + 12;
  static constexpr int kGammaOff = kScratchOff + 64 * 4;  // this CTA's slice of the norm weight
  static constexpr int kBarOff = kGammaOff + kMaxHiddenSlice * 2;  // the stages' mbarriers
  static_assert(kStageBytes % 1024 == 0, "TMA's 128-byte swizzle needs 1024-byte aligned stages");
  static constexpr int kSmemBytes = kBarOff + kStages * 8 + 1024;  // + aligning the base to 1 KB
  static_assert(kSmemBytes <= 227 * 1024, "fused decode: shared memory over the sm90 limit");
};

// ---- small device helpers ----------------------------------------------------------------

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// mbarriers and bulk copies (PTX ISA: mbarrier, cp.async.bulk).
__device__ inline void mbar_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals));
}
// One arrival that also announces `bytes` of bulk copies to complete on the barrier.
__device__ inline void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ inline void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
}
// The box of `map` at (column c0, row c1) into this CTA's shared memory, completing on `bar`.
__device__ inline void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
// Orders this thread's generic-proxy shared-memory accesses before later bulk copies.
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ inline void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
template <typename T>
__device__ inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
// A [rows][64] tile of 2-byte elements as TMA's 128-byte swizzle lays it out: 128-byte rows,
// 16-byte chunk c of row r at chunk c ^ (r % 8), so ldmatrix's 8 rows hit 8 bank groups.
__device__ inline int swizzled(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

// exp2(m - m_max), the factor that rescales a softmax partial with maximum m to m_max; a
// partial that saw no key (m = -inf) contributes nothing, also when m_max is -inf too.
__device__ inline float rescale(float m, float m_max) {
  return m == -__builtin_huge_valf() ? 0.f : exp2f(m - m_max);
}

template <typename T>
struct Vec8 {
  uint4 raw;
  __device__ void to_float(float (&f)[8]) const {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = cl::to_f32(e[i]);
  }
};

// ---- the kernel ----------------------------------------------------------------------------

template <typename T, int kGroup, int kNTiles>
struct FusedDecode {
  using Tr = DecodeTraits<T, kGroup, kNTiles>;
  static constexpr int kB = Tr::kBatchPad;
  static constexpr int D = kHeadDim;

  const FusedDecodeParams& p;
  unsigned char* smem;
  int rank, n, kv_head, b0, nb;  // b0: first sequence of this batch tile, nb: its size
  int k_begin, nk;               // hidden slice of the QKV projection; its 64-column tiles
  int o_row_begin, o_row_blocks, o_col_tiles;
  int t_qkv, t_attn, t_o;

  __device__ float* part() const { return reinterpret_cast<float*>(smem + Tr::kPartOff); }
  __device__ float* q_s() const { return reinterpret_cast<float*>(smem + Tr::kQOff); }  // [B][G][D], log2-scaled
  __device__ T* o_s() const { return reinterpret_cast<T*>(smem + Tr::kQOff); }          // [B][kOStride]
  __device__ T* kv_new() const { return reinterpret_cast<T*>(smem + Tr::kKvNewOff); }   // [B][2][D]
  __device__ float* warp_part() const { return reinterpret_cast<float*>(smem + Tr::kWarpPartOff); }
  __device__ float* m_s() const { return reinterpret_cast<float*>(smem + Tr::kMOff); }
  __device__ float* m_own() const { return reinterpret_cast<float*>(smem + Tr::kMOwnOff); }
  __device__ float* s_new() const { return reinterpret_cast<float*>(smem + Tr::kSNewOff); }
  __device__ int* tile_start() const { return reinterpret_cast<int*>(smem + Tr::kTileStartOff); }
  __device__ float* scratch() const { return reinterpret_cast<float*>(smem + Tr::kScratchOff); }
  __device__ T* gamma_s() const { return reinterpret_cast<T*>(smem + Tr::kGammaOff); }
  __device__ unsigned char* stage(int t) const { return smem + Tr::kRingOff + (t % Tr::kStages) * Tr::kStageBytes; }
  __device__ uint64_t* full_bar(int t) const { return reinterpret_cast<uint64_t*>(smem + Tr::kBarOff) + t % Tr::kStages; }

  __device__ int position(int b) const { return p.positions[b0 + b]; }

  // The page holding cached token t of sequence b (paged caches), checked against the cache.
  __device__ int32_t page_of(int b, int64_t t) const {
    const int32_t page = p.page_table[(b0 + b) * p.pages_per_seq + t / p.page_size];
    if (page < 0 || page >= p.num_pages) {
      printf("tessera fused decode: page_table[%d][%lld] = %d is outside [0, %lld) (block %d)\n",
             b0 + b, static_cast<long long>(t / p.page_size), page,
             static_cast<long long>(p.num_pages), static_cast<int>(blockIdx.x));
      __trap();
    }
    return page;
  }

  // Row of cached token t of sequence b in the cache viewed as [rows, Hkv * D]; `page` is
  // page_of(b, t) for a paged cache.
  __device__ int64_t cache_row_index(int b, int64_t t, int32_t page) const {
    return p.page_table != nullptr ? int64_t{page} * p.page_size + t % p.page_size
                                   : int64_t{b0 + b} * p.context_stride + t;
  }
  // Address of cached token t of sequence b (this KV head), K or V.
  __device__ const T* cache_row(const void* cache, int b, int64_t t) const {
    const int64_t row = cache_row_index(b, t, p.page_table != nullptr ? page_of(b, t) : 0);
    return static_cast<const T*>(cache) + (row * p.num_kv_heads + kv_head) * D;
  }

  // For attention tile t: the page of lane c's 16 tokens (c < 2), looked up one tile ahead so
  // the page-table read is off warp 0's issue path.
  __device__ int32_t prefetch_page(int t) const {
    if (p.page_table == nullptr || t < t_qkv || t >= t_qkv + t_attn) return 0;
    int b, tok0, ntok;
    attn_tile(t - t_qkv, b, tok0, ntok);
    const int c = threadIdx.x % 32;
    return c < 2 && c * kTokensPerCopy < ntok ? page_of(b, tok0 + c * kTokensPerCopy) : 0;
  }

  // ---- producer (warp 0): issue tile t of the tape into its stage ------------------------
  // `page`: prefetch_page(t) on entry, prefetch_page(t + 1) on return.
  __device__ void issue(int t, int32_t& page) const {
    unsigned char* st = stage(t);
    uint64_t* bar = full_bar(t);
    const int lane = threadIdx.x % 32;
    if (t < t_qkv) {
      const int rb = t / nk, kc = t % nk;
      const CUtensorMap* map = rb < kGroup ? &p.tm_wq : (rb == kGroup ? &p.tm_wk : &p.tm_wv);
      const int row0 = rb < kGroup ? (kv_head * kGroup + rb) * D : kv_head * D;
      const int col0 = k_begin + kc * kTileCols;
      if (lane == 0) {
        mbar_arrive_expect_tx(bar, Tr::kStageBytes);  // x rows past the batch arrive as zeros
        tma_load_2d(st, map, col0, row0, bar);
        tma_load_2d(st + Tr::kWTileBytes, &p.tm_x, col0, b0, bar);
      }
    } else if (t < t_qkv + t_attn) {
      int b, tok0, ntok;
      attn_tile(t - t_qkv, b, tok0, ntok);
      // K rows [32][D] then V rows [32][D]; lane c loads tokens [16c, 16c + 16) of the tile
      // (rows past ntok are loaded, or zero-filled past the cache, and never read).
      const int copies = (ntok + kTokensPerCopy - 1) / kTokensPerCopy;
      if (lane == 0) mbar_arrive_expect_tx(bar, copies * 2 * kTokensPerCopy * D * 2);
      __syncwarp();
      if (lane < copies) {
        const int64_t tok = tok0 + lane * kTokensPerCopy;
        const int row = int(cache_row_index(b, tok, page));
        unsigned char* dst = st + lane * kTokensPerCopy * D * 2;
        tma_load_2d(dst, &p.tm_k, kv_head * D, row, bar);
        tma_load_2d(dst + kTileBytes / 2, &p.tm_v, kv_head * D, row, bar);
      }
    } else {
      const int to = t - t_qkv - t_attn, rb = to / o_col_tiles, kc = to % o_col_tiles;
      if (lane == 0) {
        mbar_arrive_expect_tx(bar, kTileBytes);
        tma_load_2d(st, &p.tm_wo, kv_head * kGroup * D + kc * kTileCols, o_row_begin + rb * kTileRows, bar);
      }
    }
    page = prefetch_page(t + 1);
  }

  // Attention tile a (0-based within the phase): sequence b, first token, token count.
  __device__ void attn_tile(int a, int& b, int& tok0, int& ntok) const {
    b = 0;
    while (tile_start()[b + 1] <= a) ++b;
    const Range slice = seq_slice(position(b), n, rank);
    tok0 = int(slice.begin) + (a - tile_start()[b]) * kTokensPerTile;
    ntok = min(kTokensPerTile, int(slice.end) - tok0);
  }

  // ---- projections: one [128, 64] weight tile times the batch tile --------------------------
  // acc[j] covers rows warp*16 .. +16 and batch columns j*8 .. +8.
  __device__ void mma_tile(float (&acc)[kNTiles][4], const unsigned char* w_tile,
                           const unsigned char* b_rows, int b_stride_bytes, bool b_swizzled,
                           int b_col_bytes) const {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int s = 0; s < kTileCols / 16; ++s) {
      uint32_t a[4];
      {
        const int m = lane / 8, row = warp * 16 + (m & 1) * 8 + lane % 8, chunk = s * 2 + (m >> 1);
        ldmatrix_x4(a, w_tile + swizzled(row, chunk));
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        uint32_t bfrag[2];
        const int m = (lane / 8) & 1, nrow = j * 8 + lane % 8, chunk = s * 2 + m;
        const unsigned char* addr = b_swizzled ? b_rows + swizzled(nrow, chunk)
                                               : b_rows + nrow * b_stride_bytes + b_col_bytes + chunk * 16;
        ldmatrix_x2(bfrag, addr);
        mma16816<T>(acc[j], a, bfrag[0], bfrag[1]);
      }
    }
  }

  // acc (rows warp*16.., batch columns) -> dst[b * ld + row] for b < nb (f32).
  __device__ void store_acc(const float (&acc)[kNTiles][4], float* dst, int64_t ld, int limit_b) const {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int row = warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int b = j * 8 + (lane % 4) * 2 + (e & 1);
        const int r = row + (e >> 1) * 8;
        if (b < limit_b) dst[b * ld + r] = acc[j][e];
      }
    }
  }

  // Fused RMSNorm: scale the x chunk by the norm weight (rounded to T, as the model would) and
  // add its squares (first row block only: every block sees the same columns).
  __device__ void prepare_x_chunk(unsigned char* xs, int kc, bool first_block, float* sumsq) const {
    if (p.input_norm == nullptr) return;
    const int tid = threadIdx.x;
    if (tid < kB * 8) {
      const int b = tid / 8, chunk = tid % 8;
      uint4* cell = reinterpret_cast<uint4*>(xs + swizzled(b, chunk));
      Vec8<T> x{*cell}, g{*reinterpret_cast<const uint4*>(gamma_s() + kc * kTileCols + chunk * 8)};
      float xf[8], gf[8];
      x.to_float(xf);
      g.to_float(gf);
      T* out = reinterpret_cast<T*>(cell);
      float sq = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        sq += xf[i] * xf[i];
        out[i] = cl::from_f32<T>(xf[i] * gf[i]);
      }
      // 8 lanes share a row b: add their squares in a fixed order.
      sq += __shfl_xor_sync(0xffffffffu, sq, 1);
      sq += __shfl_xor_sync(0xffffffffu, sq, 2);
      sq += __shfl_xor_sync(0xffffffffu, sq, 4);
      if (first_block && chunk == 0) sumsq[b] += sq;
    }  // kB * 8 is a multiple of 32: whole warps take part in the shuffles or none
  }

  // ---- after the QKV tiles: cluster sum, norm, RoPE, cache append, new-token scores --------
  __device__ void finish_qkv() const {
    float* qkv = part();  // [G+2][B][D] then sumsq [B]
    cl::all_reduce(qkv, Tr::kQkvFloats, cl::SumOp{});
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
        q_s()[(b * kGroup + h) * D + d] = y0 * scale;
        q_s()[(b * kGroup + h) * D + d + D / 2] = y1 * scale;
      } else {
        kv_new()[b * 2 * D + d] = cl::from_f32<T>(y0);
        kv_new()[b * 2 * D + d + D / 2] = cl::from_f32<T>(y1);
        const float* vsrc = qkv + ((kGroup + 1) * kB + b) * D;
        kv_new()[b * 2 * D + D + d] = cl::from_f32<T>(vsrc[d] * rstd);
        kv_new()[b * 2 * D + D + d + D / 2] = cl::from_f32<T>(vsrc[d + D / 2] * rstd);
      }
    }
    __syncthreads();
    if (rank == 0) {  // append the new K and V to the cache
      for (int i = threadIdx.x; i < nb * 2 * 16; i += kThreads) {
        const int b = i / 32, kv = (i / 16) % 2, chunk = i % 16;
        T* dst = const_cast<T*>(cache_row(kv ? p.v_cache : p.k_cache, b, position(b))) + chunk * 8;
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(kv_new() + (b * 2 + kv) * D + chunk * 8);
      }
    }
    if (rank == new_token_rank(n)) {  // the new token's scores, one warp per (b, head)
      const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
      for (int bh = warp; bh < nb * kGroup; bh += kWarps) {
        const int b = bh / kGroup;
        float s = 0;
        for (int d = lane; d < D; d += 32) s += q_s()[bh * D + d] * cl::to_f32(kv_new()[b * 2 * D + d]);
#pragma unroll
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) s_new()[bh] = s;
      }
    }
    // Attention partials (o, l) reuse the QKV partials' space; m starts empty.
    for (int i = threadIdx.x; i < Tr::kAttnFloats; i += kThreads) part()[i] = 0.f;
    for (int i = threadIdx.x; i < kB * kGroup; i += kThreads) m_s()[i] = -__builtin_huge_valf();
    __syncthreads();
  }

  // ---- attention ---------------------------------------------------------------------------
  struct AttnState {
    float m[kGroup], l[kGroup], o[kGroup][8], q[kGroup][8];
  };

  __device__ void load_q(AttnState& st, int b) const {
    const int l16 = threadIdx.x % 16;
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      st.m[g] = -__builtin_huge_valf();
      st.l[g] = 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        st.o[g][e] = 0.f;
        st.q[g][e] = q_s()[(b * kGroup + g) * D + l16 * 8 + e];
      }
    }
  }

  // A half-warp takes kPer tokens of the tile at once: their scores reduce side by side and
  // fold into the running softmax with one rescale.
  __device__ void attn_consume(AttnState& st, const unsigned char* tile, int ntok) const {
    constexpr int kPer = kTokensPerTile / (2 * kWarps);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, half = lane / 16, l16 = lane % 16;
    float k[kPer][8], v[kPer][8];
    bool valid[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int row = warp * (kTokensPerTile / kWarps) + i * 2 + half;
      valid[i] = row < ntok;
      Vec8<T>{*reinterpret_cast<const uint4*>(tile + row * 256 + l16 * 16)}.to_float(k[i]);
      Vec8<T>{*reinterpret_cast<const uint4*>(tile + kTileBytes / 2 + row * 256 + l16 * 16)}.to_float(v[i]);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float s[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        s[i] = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) s[i] += st.q[g][e] * k[i][e];
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
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, l16 = lane % 16;
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

  // The cluster's softmax merge: max of m, rescale this CTA's (o, l), sum them; o / l -> o_s.
  __device__ void finish_attention() const {
    for (int i = threadIdx.x; i < kB * kGroup; i += kThreads) m_own()[i] = m_s()[i];
    cl::all_reduce(m_s(), kB * kGroup, cl::MaxOp{});
    float* o = part();                  // [B][G][D]
    float* l = part() + kB * kGroup * D;  // [B][G]
    for (int i = threadIdx.x; i < kB * kGroup * (D + 1); i += kThreads) {
      const int bg = i < kB * kGroup * D ? i / D : i - kB * kGroup * D;
      const float f = rescale(m_own()[bg], m_s()[bg]);
      if (i < kB * kGroup * D) o[i] *= f;
      else l[bg] *= f;
    }
    cl::all_reduce(part(), Tr::kAttnFloats, cl::SumOp{});
    // o_s aliases q_s, which the attention no longer reads.
    for (int i = threadIdx.x; i < kB * kGroup * D; i += kThreads) {
      const int bg = i / D, b = bg / kGroup, col = (bg % kGroup) * D + i % D;
      const float denom = l[bg];
      o_s()[b * Tr::kOStride + col] = cl::from_f32<T>(denom > 0.f ? o[i] / denom : 0.f);
    }
    __syncthreads();
  }

  // ---- the tape ----------------------------------------------------------------------------
  __device__ void setup() {
    const cl::cg::cluster_group cluster = cl::cg::this_cluster();
    rank = int(cluster.block_rank());
    n = int(cluster.num_blocks());
    kv_head = blockIdx.x / n;
    b0 = blockIdx.y * kB;
    nb = min(kB, p.batch - b0);
    const Range ks = hidden_slice(p.hidden, n, rank);
    k_begin = int(ks.begin);
    nk = int(ks.size()) / kTileCols;
    o_row_begin = k_begin;
    o_row_blocks = int(ks.size()) / kTileRows;
    o_col_tiles = kGroup * D / kTileCols;
    if (threadIdx.x == 0) {
      int acc = 0;
      for (int b = 0; b < kB; ++b) {
        tile_start()[b] = acc;
        if (b < nb) {
          const int pos = position(b);
          if (pos < 0 || pos + 1 > p.max_context) {
            printf("tessera fused decode: positions[%d] = %d: expected 0 <= p < max_context = %lld\n",
                   b0 + b, pos, static_cast<long long>(p.max_context));
            __trap();
          }
          acc += int((seq_slice(pos, n, rank).size() + kTokensPerTile - 1) / kTokensPerTile);
        }
      }
      tile_start()[kB] = acc;
      for (int i = 0; i < Tr::kStages; ++i) mbar_init(full_bar(i), 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (p.input_norm != nullptr)  // read once here, not per tile on the QKV critical path
      for (int i = threadIdx.x * 8; i < int(ks.size()); i += kThreads * 8)
        *reinterpret_cast<uint4*>(gamma_s() + i) =
            *reinterpret_cast<const uint4*>(static_cast<const T*>(p.input_norm) + k_begin + i);
    __syncthreads();
    t_qkv = (kGroup + 2) * nk;
    t_attn = tile_start()[kB];
    t_o = o_row_blocks * o_col_tiles;
  }

  __device__ void run() {
    setup();
    const int total = t_qkv + t_attn + t_o;
    const int warp = threadIdx.x / 32;
    int32_t page = 0;  // warp 0: the next tile's page (prefetch_page); tile 0 is a QKV tile
    if (warp == 0)
      for (int s = 0; s < Tr::kStages - 1 && s < total; ++s) issue(s, page);
    float acc[kNTiles][4] = {};
    float* sumsq = part() + (kGroup + 2) * kB * D;
    for (int i = threadIdx.x; i < kB; i += kThreads) sumsq[i] = 0.f;
    AttnState st;
    int cur_b = -1;  // the sequence whose attention state the registers hold
    for (int t = 0; t < total; ++t) {
      // Every thread is done with stage t - 1 (the x chunk was rewritten in place) before
      // warp 0 refills it.
      fence_proxy_async();
      __syncthreads();
      if (warp == 0 && t + Tr::kStages - 1 < total) issue(t + Tr::kStages - 1, page);
      mbar_wait(full_bar(t), (t / Tr::kStages) & 1);
      unsigned char* tile = stage(t);
      if (t < t_qkv) {
        const int rb = t / nk, kc = t % nk;
        prepare_x_chunk(tile + Tr::kWTileBytes, kc, rb == 0, sumsq);
        if (p.input_norm != nullptr) __syncthreads();
        mma_tile(acc, tile, tile + Tr::kWTileBytes, 0, true, 0);
        if (kc == nk - 1) {
          store_acc(acc, part() + rb * kB * D, D, kB);  // [rb][b][row]
          for (int j = 0; j < kNTiles; ++j)
            for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
        }
        if (t == t_qkv - 1) {
          __syncthreads();
          finish_qkv();
        }
      } else if (t < t_qkv + t_attn) {
        int b, tok0, ntok;
        attn_tile(t - t_qkv, b, tok0, ntok);
        while (cur_b < b) {  // sequences before b are done (some had no tiles here)
          if (cur_b >= 0) flush(st, cur_b);
          load_q(st, ++cur_b);
        }
        attn_consume(st, tile, ntok);
      } else {
        if (t == t_qkv + t_attn) {
          while (cur_b < nb - 1) {
            if (cur_b >= 0) flush(st, cur_b);
            load_q(st, ++cur_b);
          }
          if (cur_b >= 0) flush(st, cur_b);
          finish_attention();
        }
        const int to = t - t_qkv - t_attn, rb = to / o_col_tiles, kc = to % o_col_tiles;
        mma_tile(acc, tile, reinterpret_cast<const unsigned char*>(o_s()), Tr::kOStride * 2, false,
                 kc * kTileCols * 2);
        if (kc == o_col_tiles - 1) {
          float* dst = p.partial + (int64_t(kv_head) * p.batch + b0) * p.hidden + o_row_begin + rb * kTileRows;
          store_acc(acc, dst, p.hidden, nb);
          for (int j = 0; j < kNTiles; ++j)
            for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
        }
      }
    }
  }
};

template <typename T, int kGroup, int kNTiles>
__global__ void __launch_bounds__(kThreads, 1) fused_decode_kernel(const __grid_constant__ FusedDecodeParams params) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // TMA's 128-byte swizzle repeats every 1 KB: the ring starts on a 1 KB boundary.
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  // The head-sum kernel may start launching now; it waits for this grid's completion itself.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  FusedDecode<T, kGroup, kNTiles> k{params, smem};
  k.run();
}

// out[b][i] = sum over KV heads c = 0, 1, ... of partial[c][b][i], in that order.
template <typename T>
__global__ void __launch_bounds__(256) sum_heads_kernel(const float* __restrict__ partial,
                                                         T* __restrict__ out, int num_kv_heads,
                                                         int64_t elems) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < elems;
       i += int64_t(gridDim.x) * blockDim.x * 4) {
    float4 acc = *reinterpret_cast<const float4*>(partial + i);
    for (int c = 1; c < num_kv_heads; ++c) {
      const float4 v = *reinterpret_cast<const float4*>(partial + c * elems + i);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    out[i] = cl::from_f32<T>(acc.x);
    out[i + 1] = cl::from_f32<T>(acc.y);
    out[i + 2] = cl::from_f32<T>(acc.z);
    out[i + 3] = cl::from_f32<T>(acc.w);
  }
}

}  // namespace tessera::decode::kernels::sm90
