// Split-KV decode attention fed by TMA: launch_split_kv_attention's kernel for 16-bit caches at
// head dimensions 64 and 128 whose 16-token blocks are contiguous rows (a contiguous cache, or
// pages of a multiple of 16 tokens); split_kv_mma.cuh keeps the cp.async form for the others.
//
// Why: the cp.async kernel draws about 31 GB/s from each multiprocessor, so it needs all of them
// to reach the HBM's bandwidth, and an attention that runs beside a GEMM (NanoFlow's overlap)
// took its bandwidth away in proportion to the SMs it gave up. This one keeps several tiles in
// flight per multiprocessor without threads waiting on them: 4.0 TB/s from 66 SMs where the
// cp.async kernel drew 2.1 (docs/PERF.md, "Decode attention from a share of the SMs").
//
// A CTA runs kPipes independent pipelines, each a producer warp and kWarps consumer warps:
//   producer: for each 16-token block of a tile, one TMA box {64 elements, 16 rows} per 64
//             columns of the head, for K and for V, from 2D tensor maps over the caches
//             ([rows, Hkv * D], 128-byte swizzle), into kStages buffers with mbarriers;
//   consumers: warp w takes block w of each tile with split_kv_warp.cuh's math (the keys as MMA
//             rows, the query heads of a KV group as kN tiles of 8 columns), then the warps meet in
//             the pipeline's own merge area and write the partials merge_splits_kernel reads.
// Separate pipelines keep their own pace (one CTA whose eight warps share one barrier per tile
// drew 33 GB/s an SM; four pipelines of two warps, 60). The CTA takes a whole multiprocessor and
// the grid is persistent over the (split, KV head, sequence) items, so `sm_limit` CTAs take
// exactly that many SMs whatever else runs. Items go to CTAs first, then to a CTA's pipelines,
// so a few items still spread over every SM.
//
// Splits are whole tiles (the chunk rounded up to kTile tokens), so every tile starts on a
// block. Rows of a tile past the split's end are either not loaded or past the context (cache
// slots that may hold anything, NaN included): the consumer zeroes its V rows there before the
// P.V MMAs (P is 0 there, and 0 x NaN would be NaN); their scores are masked.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>

#include "common/mbarrier.cuh"
#include "decode/decode_device.cuh"
#include "decode/split_kv_warp.cuh"
#include "decode/unfused_launch.h"

namespace tessera::decode::kernels::split_kv_tma {

// The K and V caches' tensor maps ([rows, Hkv * D] of T, box {64, 16}, 128-byte swizzle).
struct CacheMaps {
  CUtensorMap k, v;
};

inline constexpr int kBlock = 16;                                      // tokens a box
inline constexpr uint64_t kWaitTimeoutNs = 5ull * 1000 * 1000 * 1000;  // never this long

template <int D, int kWarps, int kStages, int kPipes>
struct Geometry {
  static_assert(D == 64 || D == 128, "boxes of 64 columns, O's accumulators D / 8 a head tile");
  static constexpr int kTile = kBlock * kWarps;
  static constexpr int kBoxes = D / 64;  // boxes a row block
  static constexpr int kBoxBytes = kBlock * 128;
  static constexpr int kSideBytes = kTile * D * 2;  // K or V of a tile
  static constexpr int kStageBytes = 2 * kSideBytes;
  static constexpr int kBufferBytes = kStages * kStageBytes;
  static constexpr int kOStride = split_kv_warp::kMergeStride<D>;
  static constexpr int kThreads = kPipes * (kWarps + 1) * 32;
  // One pipeline's bytes: tile buffers, merge area for `group` rows, barriers; whole KB, so
  // every pipeline's buffers stay 1024-byte aligned as the swizzle needs.
  __host__ __device__ static constexpr int pipe_bytes(int group) {
    const int merge = (kWarps * group * kOStride + 2 * kWarps * group) * 4;
    return (kBufferBytes + merge + 2 * kStages * 8 + 1023) / 1024 * 1024;
  }
  static constexpr int smem_bytes(int group) { return 1024 + kPipes * pipe_bytes(group); }
  // Byte offset of (row r of the tile, 16-byte chunk ch of the head) in one side of a stage:
  // boxes in (block, 64-column half) order; within a box, chunk j of row r at j ^ (r % 8).
  __device__ static int at(int r, int ch) {
    const int row = r % kBlock, j = ch % 8;
    return (((r / kBlock) * kBoxes + ch / 8) * kBlock + row) * 128 + ((j ^ (row & 7)) << 4);
  }
};

using ::tessera::kernels::global_timer_ns;
using ::tessera::kernels::mbar_arrive;
using ::tessera::kernels::mbar_arrive_expect_tx;
using ::tessera::kernels::mbar_init;
using ::tessera::kernels::mbar_try_wait;
using ::tessera::kernels::smem_u32;

// A wait that outlived kWaitTimeoutNs: the pipeline is broken; say where, then trap (the host
// sees a launch failure). Out of line, so the waits cost no registers.
static __device__ __noinline__ void stalled(const char* what, int stage, int pipe) {
  printf(
      "tessera split-KV TMA kernel: block %d pipe %d waited more than 5 s for stage %d to be "
      "%s\n",
      int(blockIdx.x), pipe, stage, what);
  __trap();
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity, const char* what,
                                          int stage, int pipe) {
  if (mbar_try_wait(bar, parity)) return;
  const uint64_t start = global_timer_ns();
  while (!mbar_try_wait(bar, parity))
    if (global_timer_ns() - start > kWaitTimeoutNs) stalled(what, stage, pipe);
}

// An L2 policy that evicts the lines it loads first: each cache row is read once a step, and
// streaming gigabytes through L2 at full priority would push out what a kernel beside this one
// (NanoFlow's GEMM) re-reads.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void load_box(void* dst, const CUtensorMap* map, int column, int row,
                                         uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_u32(dst)),
      "l"(map), "r"(column), "r"(row), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}

// The tokens [begin, end) of one item: split `split` of sequence b's context, in whole tiles.
struct Span {
  int split, kv_head, b;
  int64_t begin, end;
};

template <int kTile>
__device__ inline Span span_of(const UnfusedDecodeParams& p, int item) {
  Span s;
  s.split = item % p.splits;
  s.kv_head = (item / p.splits) % p.num_kv_heads;
  s.b = item / (p.splits * p.num_kv_heads);
  const int64_t context = int64_t(p.positions[s.b]) + 1;
  const int64_t chunk = ((context + p.splits - 1) / p.splits + kTile - 1) / kTile * kTile;
  s.begin = min(context, s.split * chunk);
  s.end = min(context, s.begin + chunk);
  return s;
}

template <typename T, int D, int kN, int kWarps, int kStages, int kPipes>
__global__ void __launch_bounds__(kPipes*(kWarps + 1) * 32)
    split_kv_tma_kernel(const UnfusedDecodeParams p, const __grid_constant__ CacheMaps maps) {
  using G = Geometry<D, kWarps, kStages, kPipes>;
  extern __shared__ char smem_raw[];
  const int group = p.num_heads / p.num_kv_heads;
  const int pipe = threadIdx.x / ((kWarps + 1) * 32), local = threadIdx.x % ((kWarps + 1) * 32);
  const int lane = local % 32, warp = local / 32;
  char* buf =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)) +
      pipe * G::pipe_bytes(group);
  float* o_s = reinterpret_cast<float*>(buf + G::kBufferBytes);  // [kWarps][group][kOStride]
  float* m_s = o_s + kWarps * group * G::kOStride;               // [kWarps][group]
  float* l_s = m_s + kWarps * group;                             // [kWarps][group]
  uint64_t* full = reinterpret_cast<uint64_t*>(l_s + kWarps * group);
  uint64_t* empty = full + kStages;
  if (local == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps);
    }
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const int items = p.splits * p.num_kv_heads * p.batch;
  const int first_item = pipe * gridDim.x + blockIdx.x, stride = kPipes * gridDim.x;

  if (warp == kWarps) {  // the producer
    const uint64_t policy = evict_first_policy();
    int k = 0;  // tiles issued
    for (int item = first_item; item < items; item += stride) {
      const Span sp = span_of<G::kTile>(p, item);
      const int tiles = int((sp.end - sp.begin + G::kTile - 1) / G::kTile);
      for (int i = 0; i < tiles; ++i, ++k) {
        const int s = k % kStages;
        const int64_t t0 = sp.begin + int64_t(i) * G::kTile;
        const int blocks = int(min(int64_t(kWarps), (sp.end - t0 + kBlock - 1) / kBlock));
        // Lane -> (block, side, 64-column box); its page lookup before the wait, so its latency
        // hides behind the consumers'.
        constexpr int kLoads = kWarps * 2 * G::kBoxes;
        static_assert(kLoads <= 32, "one box a lane");
        const int block = lane / (2 * G::kBoxes), side = (lane / G::kBoxes) % 2;
        const int box = lane % G::kBoxes;
        const bool loads = lane < kLoads && block < blocks;
        const int64_t row = loads ? cache_row_of(p, sp.b, t0 + block * kBlock) : 0;
        if (k >= kStages) mbar_wait(&empty[s], ((k / kStages) - 1) & 1, "empty", s, pipe);
        if (lane == 0) mbar_arrive_expect_tx(&full[s], uint32_t(blocks) * kBlock * D * 2 * 2);
        __syncwarp();
        if (loads)
          load_box(buf + s * G::kStageBytes + side * G::kSideBytes +
                       (block * G::kBoxes + box) * G::kBoxBytes,
                   side == 0 ? &maps.k : &maps.v, sp.kv_head * D + box * 64, int(row), &full[s],
                   policy);
      }
    }
    return;
  }

  const float scale = p.softmax_scale * kLog2e;
  const int64_t q_stride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_heads) * D;
  int k = 0;  // tiles consumed
  for (int item = first_item; item < items; item += stride) {
    const Span sp = span_of<G::kTile>(p, item);
    const int tiles = int((sp.end - sp.begin + G::kTile - 1) / G::kTile);
    uint32_t qb[D / 16][kN][2];
    split_kv_warp::load_q<T, D, kN>(
        static_cast<const T*>(p.q) + sp.b * q_stride + int64_t(sp.kv_head) * group * D, group, lane,
        qb);
    split_kv_warp::Partial<D, kN> w;
    for (int i = 0; i < tiles; ++i, ++k) {
      const int st = k % kStages;
      mbar_wait(&full[st], (k / kStages) & 1, "full", st, pipe);
      const char* k_s = buf + st * G::kStageBytes;
      char* v_s = buf + st * G::kStageBytes + G::kSideBytes;
      const int64_t first = sp.begin + int64_t(i) * G::kTile + warp * kBlock;  // this warp's block
      if (first + kBlock > sp.end) {
        const int valid = int(max(int64_t(0), sp.end - first));
        for (int e = lane; e < kBlock * (D / 8); e += 32) {
          const int r = e / (D / 8);
          if (r >= valid)
            *reinterpret_cast<uint4*>(v_s + G::at(warp * kBlock + r, e % (D / 8))) = uint4{};
        }
        // These stores come before the next TMA write of the buffer (another proxy).
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
      }
      split_kv_warp::attend<T, D, kN>(
          qb, [&](int r, int ch) { return k_s + G::at(warp * kBlock + r, ch); },
          [&](int r, int ch) { return v_s + G::at(warp * kBlock + r, ch); }, first, sp.end, scale,
          lane, w);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[st]);
    }
    // The warps' rows meet in the pipeline's merge area (its consumers only: named barrier).
    w.reduce_sums();
    asm volatile("bar.sync %0, %1;" ::"r"(1 + pipe), "r"(kWarps * 32) : "memory");
    split_kv_warp::stash(w, group, warp * group, lane, o_s, m_s, l_s);
    asm volatile("bar.sync %0, %1;" ::"r"(1 + pipe), "r"(kWarps * 32) : "memory");
    split_kv_warp::write_partials<D>(o_s, m_s, l_s, kWarps, group, group, local, kWarps * 32, p,
                                     sp.b, sp.kv_head, sp.split);
  }
}

}  // namespace tessera::decode::kernels::split_kv_tma
