// Attention forward and chunked accumulation for Hopper (sm_90a), built on CuTe: TMA loads
// into swizzled shared memory, WGMMA, warp specialization, a pipelined K/V ring.
//
// What it computes (attention.h has the full semantics): for each job j (a Q chunk), each
// query row i, head h, over the keys of the job's KV chunks c that the chunk's mask leaves
// visible,
//   s = scale * <q_i, k>,  m = max s,  l = sum exp(s - m),  o_i = sum exp(s - m) v / l,
//   lse_i = m + log l.
// Forward writes o in the input dtype and lse (f32). Accumulate starts from the job's f32
// state (O_state, lse_state) as if it were one more key with score lse_state and value
// O_state, and writes the merged state back:
//   m0 = lse_state, l0 = 1, acc0 = O_state  (or m0 = -inf, l0 = 0, acc0 = 0 when lse_state = -inf).
// A job with a final output (the state's last fold) writes acc / l in the input dtype there
// instead of the f32 state, and the lse as usual: the finalize pass folded into the epilogue.
//
// Grid: x = the m-blocks (kBlockM query rows) of all jobs, longest causal tiles first;
// y = query head; z = batch. One CTA per tile, kNumThreads = 128 * (1 + kNumMmaWarpGroups):
//   warp group 0: producer. One thread issues TMA: the Q tile once, then for every visible KV
//                 block of every chunk, K then V into a kStages-deep ring (full/empty mbarriers).
//   warp groups 1..: consumers, 64 query rows each. Per KV block n (in chunk order):
//     S_n = Q K_n^T (SS WGMMA) is issued together with O += P_{n-1} V_{n-1} (RS WGMMA, P from
//     registers); the softmax of S_n (masking, row max, exp2, row sums) runs while the PV
//     product of the previous block is still on the tensor cores, then O is rescaled and S_n
//     becomes P_n (bf16/fp16) for the next iteration.
// Scores are kept in log2 units (scale * log2(e)) so every exponential is one ex2.
//
// Varlen (cu_seqlens given): the launch is one job and one chunk over packed [total, H, D]
// tensors; grid z is the sequence, and each CTA reads its sequence's offsets and lengths from
// the device arrays and runs as a batch-1 job at those offsets (causal bottom-right aligned).
// Out-of-range offsets are clamped to the packed tensors, so bad cu_seqlens never write out of
// bounds. K/V rows past the sequence's end belong to the next sequence: masked like rows past a
// chunk's end.
//
// Masks: a KV block is skipped when no query row of the tile sees any of its keys, is
// processed without masking when every row sees every key, and is masked per element
// otherwise (causal by global positions, or past the chunk's end). Rows past the job's end
// are computed on zero-filled Q (TMA fills out-of-bounds rows with zeros) and never written.
//
// FP8 (Element e4m3, forward only): both products are FP8 WGMMA; the scores scale by the
// per-head descales of q and k, O by v's, and O is written in bf16. V is read through its
// transposed copy (attention_launch.h: launch_fp8_transpose_v), P packed into e4m3 in place
// (convert_p_fp8).
//
// Assumptions (checked on the host): head dim 64, 128 or 256, 16-byte aligned bases, strides
// multiples of 16 bytes, all jobs of a launch share B, Hq, Hkv, D and dtype.
#pragma once

#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED  // N = 176 etc. WGMMA tile widths
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

// cute/tensor.hpp must come before the SM90 atoms (they build on it): keep this block apart.
#include <cute/tensor.hpp>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>

#include "attn/attention_launch.h"
#include "common/mbarrier.cuh"
#include "common/smem_limit.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::attn::kernels::sm90 {

using namespace cute;

// ---- Traits ---------------------------------------------------------------------------------

template <class Element>
inline constexpr bool kIsFp8 = cute::is_same_v<Element, cutlass::float_e4m3_t>;

// The PV product's atom: V^T is read D-contiguous (MN-major) for 16-bit inputs; FP8 WGMMA takes
// K-major operands only, so FP8 reads V's transposed copy (launch_fp8_transpose_v), keys
// contiguous.
template <class Element, int kHeadDim, int kBlockN>
constexpr auto pv_mma_atom() {
  using Tile = Shape<_64, Int<kHeadDim>, Int<kBlockN>>;
  if constexpr (kIsFp8<Element>)
    return GMMA::rs_op_selector<Element, Element, float, Tile, GMMA::Major::K, GMMA::Major::K>();
  else
    return GMMA::rs_op_selector<Element, Element, float, Tile, GMMA::Major::K, GMMA::Major::MN>();
}

// V^T's shared-memory layout, shape (D, kBlockN) or (D, kBlockN, stages). 16-bit: D contiguous,
// panels of 64 D-columns holding all kBlockN keys, so one TMA box (64, kBlockN) fills one panel.
// FP8: keys contiguous (as K's tile, with D as the rows).
template <class Element, class TileShape>
constexpr auto vt_smem_layout() {
  if constexpr (kIsFp8<Element>)
    return tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, TileShape{});
  else if constexpr (rank_v<TileShape> == 2)
    return tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, TileShape{}, Step<_2, _1>{});
  else
    return tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, TileShape{}, Step<_2, _1, _3>{});
}

// kFreshQDescriptors_: rebuild Q's WGMMA descriptors every KV block from an address the
// compiler cannot see through. They are loop-invariant, and ptxas hoists all of them out of the
// loop (two registers a k-step, 32 at D256), then spills them between the S GEMM's issues.
// Measured on an H200 (docs/attention-kernels.md, run 6): D256 +7%, D128 -0.5% to +3.8%
// (+1% typical), D64 -1%.
// kPingPong_: the consumer warp groups take turns issuing their GEMMs (FlashAttention-3's
// warp-group ping-pong), so one group's softmax runs while the other's GEMMs hold the tensor
// cores instead of both softmaxes contending for the exponential unit at once.
template <class Element_, int kHeadDim_, int kBlockN_ = 128, int kStages_ = 2,
          int kNumMmaWarpGroups_ = 2, bool kFreshQDescriptors_ = (kHeadDim_ >= 128),
          bool kPingPong_ = false>
struct AttentionTraits {
  using Element = Element_;
  static constexpr bool kFp8 = kIsFp8<Element_>;
  // What o (and final_o) are written in: the input type, bf16 for FP8 inputs.
  using OutElement = cute::conditional_t<kFp8, cutlass::bfloat16_t, Element_>;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNumMmaWarpGroups = kNumMmaWarpGroups_;  // consumers, 64 rows each
  static constexpr int kBlockM = 64 * kNumMmaWarpGroups;        // query rows per CTA
  static constexpr int kBlockN = kBlockN_;                      // keys per pipeline stage
  static constexpr int kStages = kStages_;
  static constexpr bool kFreshQDescriptors = kFreshQDescriptors_;
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kNumThreads = 128 * (1 + kNumMmaWarpGroups);
  static constexpr int kNumConsumerThreads = 128 * kNumMmaWarpGroups;
  static constexpr int kNumConsumerWarps = 4 * kNumMmaWarpGroups;
  // setmaxnreg budgets: 65536 / kNumThreads per thread at launch (168 for 384 threads, 128
  // for 512); the producer gives its registers to the consumers. Wider S tiles need the
  // larger consumer budget.
  // Head dim 256 holds a 64 x 256 f32 O accumulator (128 registers a thread) beside S and P.
  static constexpr int kProducerRegisters =
      (kNumMmaWarpGroups > 2 || kBlockN_ > 128 || kHeadDim_ == 256) ? 24 : 40;
  static constexpr int kConsumerRegisters =
      kNumMmaWarpGroups > 2 ? 160 : ((kBlockN_ > 128 || kHeadDim_ == 256) ? 240 : 232);

  static_assert(cute::is_same_v<Element, cutlass::bfloat16_t> ||
                cute::is_same_v<Element, cutlass::half_t> || kFp8);
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dim 64, 128 or 256");
  static_assert(!kFp8 || (kHeadDim >= 128 && kBlockN_ % 128 == 0),
                "FP8: 128-byte rows of Q, K (D >= 128) and of V^T (kBlockN 128 or 256)");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 64 && kBlockN <= 256,
                "kBlockN: WGMMA N and K steps");
  static_assert(kStages >= 2, "at least double buffering");
  static_assert(kNumMmaWarpGroups == 2 || kNumMmaWarpGroups == 3, "2 or 3 consumer warp groups");
  static_assert(128 * kProducerRegisters + kNumConsumerThreads * kConsumerRegisters <= 65536,
                "register file");

  using TileQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T: M, N, K
  using TilePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O = P V:   M, N, K
  using WarpGroupLayout = Layout<Shape<Int<kNumMmaWarpGroups>, _1, _1>>;
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      WarpGroupLayout{}));
  // P comes from registers (K-major by construction); V^T as vt_smem_layout says.
  using TiledMmaPV = decltype(make_tiled_mma(pv_mma_atom<Element, kHeadDim, kBlockN>(),
                                             WarpGroupLayout{}));

  // Q [kBlockM, D] and K [kBlockN, D] tiles: D contiguous, 128-byte swizzle, 64-column panels.
  using SmemLayoutQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKTile = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                                 Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V^T [D, kBlockN] (vt_smem_layout).
  using SmemLayoutVtTile =
      decltype(vt_smem_layout<Element, Shape<Int<kHeadDim>, Int<kBlockN>>>());
  using SmemLayoutVt =
      decltype(vt_smem_layout<Element, Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>>());

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);  // one K or V tile
};

// ---- TMA descriptors: (L, D, H, B) views of [B, L, H, D] tensors, V as (D, L, H, B) --------

using StrideLDHB = Stride<int64_t, _1, int64_t, int64_t>;
using StrideDLHB = Stride<_1, int64_t, int64_t, int64_t>;

template <class Traits>
auto make_tma_q(const typename Traits::Element* data, int len, int heads, int batch,
                int64_t stride_l, int64_t stride_h, int64_t stride_b) {
  auto g = make_tensor(make_gmem_ptr(data), make_shape(len, Int<Traits::kHeadDim>{}, heads, batch),
                       StrideLDHB{stride_l, _1{}, stride_h, stride_b});
  return make_tma_copy(SM90_TMA_LOAD{}, g, typename Traits::SmemLayoutQ{});
}

template <class Traits>
auto make_tma_k(const typename Traits::Element* data, int len, int heads, int batch,
                int64_t stride_l, int64_t stride_h, int64_t stride_b) {
  auto g = make_tensor(make_gmem_ptr(data), make_shape(len, Int<Traits::kHeadDim>{}, heads, batch),
                       StrideLDHB{stride_l, _1{}, stride_h, stride_b});
  return make_tma_copy(SM90_TMA_LOAD{}, g, typename Traits::SmemLayoutKTile{});
}

// FP8 reads the transposed copy [B, Hkv, D, len] (keys contiguous): stride_l is then the
// stride of D.
template <class Traits>
auto make_tma_vt(const typename Traits::Element* data, int len, int heads, int batch,
                 int64_t stride_l, int64_t stride_h, int64_t stride_b) {
  if constexpr (Traits::kFp8) {
    auto g =
        make_tensor(make_gmem_ptr(data), make_shape(Int<Traits::kHeadDim>{}, len, heads, batch),
                    Stride<int64_t, _1, int64_t, int64_t>{stride_l, _1{}, stride_h, stride_b});
    return make_tma_copy(SM90_TMA_LOAD{}, g, typename Traits::SmemLayoutVtTile{});
  } else {
    auto g =
        make_tensor(make_gmem_ptr(data), make_shape(Int<Traits::kHeadDim>{}, len, heads, batch),
                    StrideDLHB{_1{}, stride_l, stride_h, stride_b});
    return make_tma_copy(SM90_TMA_LOAD{}, g, typename Traits::SmemLayoutVtTile{});
  }
}

// ---- Params -------------------------------------------------------------------------------

struct JobParams {
  int lq = 0;
  int m_block_begin = 0;  // first grid x of this job
  int num_m_blocks = 0;
  int kv_begin = 0, kv_end = 0;
  void* o = nullptr;
  int64_t o_stride_b = 0, o_stride_l = 0, o_stride_h = 0;
  float* lse = nullptr;
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_l = 0;
  int fresh = 0;  // accumulate: the state is empty (not read)
  // accumulate: the state's last fold writes the normalized output here (Element) instead of
  // the f32 state O; nullptr: writes the state.
  void* final_o = nullptr;
  int64_t final_o_stride_b = 0, final_o_stride_l = 0, final_o_stride_h = 0;
};

struct KvParams {
  int lkv = 0;
  int causal = 0;
  int64_t q_start = 0, q_stride = 1, kv_start = 0, kv_stride = 1;
};

template <class Traits>
struct AttentionParams {
  using Element = typename Traits::Element;
  using TmaQ = decltype(make_tma_q<Traits>(nullptr, 1, 1, 1, 0, 0, 0));
  using TmaK = decltype(make_tma_k<Traits>(nullptr, 1, 1, 1, 0, 0, 0));
  using TmaVt = decltype(make_tma_vt<Traits>(nullptr, 1, 1, 1, 0, 0, 0));
  // Prototypes (their coordinate strides are the same for every tensor of a role); each
  // job / chunk has its own descriptor below.
  TmaQ tma_q;
  TmaK tma_k;
  TmaVt tma_vt;
  cute::TmaDescriptor q_desc[kMaxJobsPerLaunch];
  cute::TmaDescriptor k_desc[kMaxChunksPerLaunch];
  cute::TmaDescriptor v_desc[kMaxChunksPerLaunch];
  JobParams jobs[kMaxJobsPerLaunch];
  KvParams kv[kMaxChunksPerLaunch];
  int num_jobs = 0;
  int batch = 0, heads_q = 0, heads_kv = 0, group = 1;  // group = Hq / Hkv
  int tma_batch = 0;  // the descriptors' batch extent: batch, or 1 for varlen's packed tensors
  // Varlen: sequence b's rows are [cu_q[b], cu_q[b+1]) of the packed q/o/lse and [cu_k[b],
  // cu_k[b+1]) of k/v (device arrays of batch + 1 values); nullptr otherwise.
  const int* cu_q = nullptr;
  const int* cu_k = nullptr;
  float scale_log2 = 0;                                 // softmax_scale * log2(e)
  int accumulate = 0;
  // FP8: per-head descales (device, [Hq], [Hkv], [Hkv]); the scores scale by descale_q *
  // descale_k, the output by descale_v. nullptr for 16-bit inputs.
  const float* descale_q = nullptr;
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
};

// ---- Device helpers -------------------------------------------------------------------------

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr uint64_t kWaitTimeoutNs = 5ull * 1000 * 1000 * 1000;  // a CTA never waits this long

enum class WaitPoint : int { kQ, kKFull, kKEmpty, kVFull, kVEmpty };

using ::tessera::kernels::global_timer_ns;
using ::tessera::kernels::mbar_arrive;
using ::tessera::kernels::mbar_arrive_expect_tx;
using ::tessera::kernels::mbar_init;
using ::tessera::kernels::mbar_try_wait;
using ::tessera::kernels::smem_u32;

// Waits for the phase of `bar` with parity `parity`. Bounded: a CTA whose wait outlives
// kWaitTimeoutNs has a broken pipeline, and the launch fails with an error on the host. The
// producer traps; a consumer stores to the invalid address 16 * (1 + wait point) and exits
// (illegal-address error), because a trap inside the consumers' register region makes ptxas
// ignore setmaxnreg for it (seen: ~500 bytes of spills and serialized WGMMA). printf would be
// a call that serializes WGMMA too, so it is only compiled with TESSERA_ATTN_WAIT_PRINTF.
template <WaitPoint kWhat>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  if (mbar_try_wait(bar, parity)) return;
  const uint64_t start = global_timer_ns();
  while (!mbar_try_wait(bar, parity)) {
    if (global_timer_ns() - start > kWaitTimeoutNs) {
#ifdef TESSERA_ATTN_WAIT_PRINTF
      printf(
          "tessera attn sm90: CTA (%d,%d,%d) thread %d waited > 5 s at wait point %d (parity %u)\n",
          blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, int(kWhat), parity);
#endif
      if constexpr (kWhat == WaitPoint::kKEmpty || kWhat == WaitPoint::kVEmpty) {
        asm volatile("trap; // tessera attn: producer wait point %0" ::"n"(int(kWhat)));
      } else {
        asm volatile("st.global.u32 [%0], %1;" ::"l"(uint64_t(16 * (1 + int(kWhat)))),
                     "r"(int(kWhat))
                     : "memory");
        asm volatile("exit;");
      }
    }
  }
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Ping-pong turns between consumer warp groups: group g waits on named barrier kTurnBarrier + g
// (its 128 threads sync, the previous group's 128 arrive) and passes the turn to the next.
constexpr int kTurnBarrier = 1;  // barrier 0 is __syncthreads

__device__ __forceinline__ void turn_wait(int wg) {
  asm volatile("bar.sync %0, 256;" ::"r"(kTurnBarrier + wg) : "memory");
}

template <int kGroups>
__device__ __forceinline__ void turn_pass(int wg) {
  asm volatile("bar.arrive %0, 256;" ::"r"(kTurnBarrier + (wg + 1) % kGroups) : "memory");
}

template <class Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t bits;
  if constexpr (cute::is_same_v<Element, cutlass::bfloat16_t>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &v, 4);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&bits, &v, 4);
  }
  return bits;
}

// Four floats as e4m3 bytes, a in the lowest (nearest even, saturating; P is in [0, 1]).
__device__ __forceinline__ uint32_t pack4_e4m3(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

struct PipeState {
  int index = 0;
  uint32_t phase = 0;
  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

// ---- Tile and KV-block bookkeeping (identical in producer and consumers) --------------------

struct TileInfo {
  int job, m_block, h, b, hkv;
  int lq;                  // the job's query rows (varlen: this sequence's)
  int row_begin, row_end;  // [row_begin, row_end) of the job's query rows, row_end <= lq
  int b_mem;               // batch index into the tensors (varlen: 0, the packed batch)
  int q_offset, k_offset;  // varlen: the sequence's first row in q/o/lse and in k/v; else 0
  int lkv;                 // varlen: the sequence's keys
};

template <class Traits>
struct SharedStorage {
  using Element = typename Traits::Element;
  alignas(1024) cute::array_aligned<Element, cute::cosize_v<typename Traits::SmemLayoutQ>> q;
  alignas(1024) cute::array_aligned<Element, cute::cosize_v<typename Traits::SmemLayoutK>> k;
  alignas(1024) cute::array_aligned<Element, cute::cosize_v<typename Traits::SmemLayoutVt>> v;
  alignas(8) uint64_t q_full;
  KvParams varlen_kv;  // varlen: this CTA's sequence as its one chunk
  uint64_t k_full[Traits::kStages];
  uint64_t k_empty[Traits::kStages];
  uint64_t v_full[Traits::kStages];
  uint64_t v_empty[Traits::kStages];
};

template <class Traits, bool kVarlen>
__device__ __forceinline__ TileInfo locate_tile(const AttentionParams<Traits>& p) {
  int x = int(blockIdx.x);
  int j = 0;
  while (j + 1 < p.num_jobs && x >= p.jobs[j + 1].m_block_begin) ++j;
  const JobParams& job = p.jobs[j];
  TileInfo t;
  t.job = j;
  t.m_block = job.num_m_blocks - 1 - (x - job.m_block_begin);  // longest causal tiles first
  t.h = int(blockIdx.y);
  t.b = int(blockIdx.z);
  t.hkv = t.h / p.group;
  t.lq = job.lq;
  t.b_mem = t.b;
  t.q_offset = t.k_offset = t.lkv = 0;
  if constexpr (kVarlen) {
    // Clamped to the packed extents (job.lq and kv[0].lkv hold the totals).
    const int total_q = job.lq, total_k = p.kv[0].lkv;
    t.q_offset = min(max(p.cu_q[t.b], 0), total_q);
    t.lq = min(max(p.cu_q[t.b + 1], t.q_offset), total_q) - t.q_offset;
    t.k_offset = min(max(p.cu_k[t.b], 0), total_k);
    t.lkv = min(max(p.cu_k[t.b + 1], t.k_offset), total_k) - t.k_offset;
    t.b_mem = 0;
  }
  t.row_begin = t.m_block * Traits::kBlockM;
  t.row_end = min(t.lq, t.row_begin + Traits::kBlockM);
  return t;
}

// Last key index of a chunk visible to query row `row` (-1: none).
__device__ __forceinline__ int64_t last_visible_key(const KvParams& kv, int64_t row) {
  if (!kv.causal) return kv.lkv - 1;
  const int64_t q = kv.q_start + row * kv.q_stride;
  if (q < kv.kv_start) return -1;
  return min(int64_t(kv.lkv) - 1, (q - kv.kv_start) / kv.kv_stride);
}

// Walks the visible KV blocks of a job's chunks in order.
template <int kBlockN>
struct KvCursor {
  int chunk, chunk_end;
  int n, n_end;    // block n of [0, n_end) in this chunk
  int n_unmasked;  // blocks [0, n_unmasked) need no masking
  int64_t row_first, row_last;

  __device__ __forceinline__ void start(const JobParams& job, const KvParams* kv,
                                        const TileInfo& t) {
    chunk = job.kv_begin;
    chunk_end = job.kv_end;
    row_first = t.row_begin;
    row_last = t.row_end - 1;
    settle(kv);
  }
  // Moves to block 0 of the first chunk at or after `chunk` that has a visible block.
  __device__ __forceinline__ void settle(const KvParams* kv) {
    for (; chunk < chunk_end; ++chunk) {
      const KvParams& c = kv[chunk];
      const int64_t last = last_visible_key(c, row_last);
      const int64_t all_see = last_visible_key(c, row_first);  // keys [0, all_see] seen by all rows
      n_end = int((last + 1 + kBlockN - 1) / kBlockN);
      n_unmasked = int((all_see + 1) / kBlockN);
      if (n_end > 0) {
        n = 0;
        return;
      }
    }
  }
  __device__ __forceinline__ bool valid() const { return chunk < chunk_end; }
  __device__ __forceinline__ bool need_mask() const { return n >= n_unmasked; }
  __device__ __forceinline__ void advance(const KvParams* kv) {
    if (++n >= n_end) {
      ++chunk;
      settle(kv);
    }
  }
};

// ---- The kernel -------------------------------------------------------------------------------

// kVarlen: the launch is varlen (cu_seqlens); a separate instantiation, so the batched kernel
// keeps its chunk table in parameter space and its offsets constant (a run-time choice cost the
// consumers registers: 12 -> 72 bytes of spills at D128).
template <class Traits, bool kVarlen>
struct AttentionKernel {
  using Element = typename Traits::Element;
  using OutElement = typename Traits::OutElement;
  using Params = AttentionParams<Traits>;
  using Storage = SharedStorage<Traits>;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kStages = Traits::kStages;

  static constexpr size_t kSmemBytes = sizeof(Storage) + 1024;  // + alignment slack

  // -- producer: one thread issues every TMA --
  __device__ static void produce(const Params& p, const KvParams* kvs, Storage& ss,
                                 const TileInfo& t) {
    const JobParams& job = p.jobs[t.job];
    KvCursor<kBlockN> cur;
    cur.start(job, kvs, t);
    if (!cur.valid()) return;  // nothing visible: consumers do not wait for Q either

    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});

    Tensor mQ =
        p.tma_q.get_tma_tensor(make_shape(job.lq, Int<kHeadDim>{}, p.heads_q, p.tma_batch));
    Tensor gQ = local_tile(domain_offset(make_coord(t.q_offset, _0{}), mQ(_, _, t.h, t.b_mem)),
                           Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(t.m_block, _0{}));
    auto [tQgQ, tQsQ] =
        tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    mbar_arrive_expect_tx(&ss.q_full, Traits::kQBytes);
    copy(p.tma_q.with(&p.q_desc[t.job], ss.q_full), tQgQ, tQsQ);

    PipeState ps;
    for (; cur.valid(); cur.advance(kvs)) {
      const KvParams& kv = p.kv[cur.chunk];  // the descriptor's extent (varlen: the total)
      Tensor mK =
          p.tma_k.get_tma_tensor(make_shape(kv.lkv, Int<kHeadDim>{}, p.heads_kv, p.tma_batch));
      Tensor gK = local_tile(domain_offset(make_coord(t.k_offset, _0{}), mK(_, _, t.hkv, t.b_mem)),
                             Shape<Int<kBlockN>, Int<kHeadDim>>{},
                             make_coord(_, _0{}));  // (kBlockN, D, blocks)
      Tensor mVt =
          p.tma_vt.get_tma_tensor(make_shape(Int<kHeadDim>{}, kv.lkv, p.heads_kv, p.tma_batch));
      Tensor gVt = local_tile(
          domain_offset(make_coord(_0{}, t.k_offset), mVt(_, _, t.hkv, t.b_mem)),
          Shape<Int<kHeadDim>, Int<kBlockN>>{}, make_coord(_0{}, _));  // (D, kBlockN, blocks)
      auto [tKgK, tKsK] =
          tma_partition(p.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVgV, tVsV] = tma_partition(p.tma_vt, _0{}, Layout<_1>{}, group_modes<0, 2>(sVt),
                                        group_modes<0, 2>(gVt));
      mbar_wait<WaitPoint::kKEmpty>(&ss.k_empty[ps.index], ps.phase ^ 1u);
      mbar_arrive_expect_tx(&ss.k_full[ps.index], Traits::kKVBytes);
      copy(p.tma_k.with(&p.k_desc[cur.chunk], ss.k_full[ps.index]), tKgK(_, cur.n),
           tKsK(_, ps.index));
      mbar_wait<WaitPoint::kVEmpty>(&ss.v_empty[ps.index], ps.phase ^ 1u);
      mbar_arrive_expect_tx(&ss.v_full[ps.index], Traits::kKVBytes);
      copy(p.tma_vt.with(&p.v_desc[cur.chunk], ss.v_full[ps.index]), tVgV(_, cur.n),
           tVsV(_, ps.index));
      ps.template advance<kStages>();
    }
  }

  // -- consumers --
  template <class TensorA, class TensorB, class TensorC>
  __device__ static void gemm_ss_zero(typename Traits::TiledMmaQK& mma, const TensorA& a,
                                      const TensorB& b, TensorC& c) {
    warpgroup_fence_operand(c);
    warpgroup_arrive();
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(a); ++k) {
      cute::gemm(mma, a(_, _, k), b(_, _, k), c);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(c);
  }

  template <class TensorA, class TensorB, class TensorC>
  __device__ static void gemm_rs(typename Traits::TiledMmaPV& mma, TensorA& a, const TensorB& b,
                                 TensorC& c) {
    warpgroup_fence_operand(a);
    warpgroup_fence_operand(c);
    warpgroup_arrive();
    mma.accumulate_ = GMMA::ScaleOut::One;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(a); ++k) cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    warpgroup_commit_batch();
    warpgroup_fence_operand(c);
    warpgroup_fence_operand(a);
  }

  // Online softmax of one S block (this thread: 2 rows x kBlockN/4 columns). Masks columns
  // past `limit[r]` when kMask; leaves exp2 values in S; returns the O correction per row.
  // Row max and row sum run over kChains independent partials per row: with one warp per
  // SMSP per warp group there is little to hide a 48-long dependent chain behind.
  template <bool kMask, class TensorS>
  __device__ static void softmax_block(TensorS& s, float (&row_max)[2], float (&row_sum)[2],
                                       float (&correction)[2], float scale_log2, int col0,
                                       const int (&limit)[2]) {
    constexpr int kColGroups = kBlockN / 8;
    constexpr int kChains = 4;
    float part[2][kChains];
    int row_limit[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      row_limit[r] = limit[r] - col0;  // column c + 8v of this thread is masked past it
      CUTE_UNROLL
      for (int k = 0; k < kChains; ++k) part[r][k] = -INFINITY;
    }
    CUTE_UNROLL
    for (int v = 0; v < kColGroups; ++v) {
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          float& x = s(make_coord(c, r, v), 0, 0);
          if constexpr (kMask) {
            if (c + 8 * v > row_limit[r]) x = -INFINITY;
          }
          float& m = part[r][(2 * v + c) % kChains];
          m = fmaxf(m, x);
        }
      }
    }
    float use_max[2];
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      float block_max = fmaxf(fmaxf(part[r][0], part[r][1]), fmaxf(part[r][2], part[r][3]));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float new_max = fmaxf(row_max[r], block_max * scale_log2);
      // A row that has seen no key keeps max -inf; subtract 0 then so no inf - inf appears.
      use_max[r] = new_max == -INFINITY ? 0.0f : new_max;
      correction[r] = fast_exp2(row_max[r] - use_max[r]);
      row_max[r] = new_max;
      CUTE_UNROLL
      for (int k = 0; k < kChains; ++k) part[r][k] = 0.0f;
    }
    CUTE_UNROLL
    for (int v = 0; v < kColGroups; ++v) {
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          float& x = s(make_coord(c, r, v), 0, 0);
          x = fast_exp2(fmaf(x, scale_log2, -use_max[r]));
          part[r][(2 * v + c) % kChains] += x;
        }
      }
    }
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const float sum = (part[r][0] + part[r][1]) + (part[r][2] + part[r][3]);
      row_sum[r] = row_sum[r] * correction[r] + sum;
    }
  }

  // O *= correction per row; skipped when the whole warp's rows kept their max (the common
  // case after the first blocks; multiplying by exactly 1 changes nothing).
  template <class TensorO>
  __device__ static void rescale(TensorO& o, const float (&correction)[2]) {
    if (!__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) return;
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      CUTE_UNROLL
      for (int v = 0; v < kHeadDim / 8; ++v) {
        o(make_coord(0, r, v), 0, 0) *= correction[r];
        o(make_coord(1, r, v), 0, 0) *= correction[r];
      }
    }
  }

  // S (fp32 accumulator layout) -> P (element type, A-operand register layout of the PV GEMM).
  // Accumulator value (c, r, v) is column 8v + c (+ lane offset); A value (c, r, h) of k-block
  // kk is column 16kk + 8h + c: the same column when v = 2kk + h.
  template <class TensorS, class TensorP>
  __device__ static void convert_p(const TensorS& s, TensorP& p) {
    uint32_t* p32 = reinterpret_cast<uint32_t*>(raw_pointer_cast(p.data()));
    CUTE_UNROLL
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          const int idx = p.layout()(make_coord(make_coord(0, r, h), 0, kk));
          p32[idx / 2] = pack2<Element>(s(make_coord(0, r, 2 * kk + h), 0, 0),
                                        s(make_coord(1, r, 2 * kk + h), 0, 0));
        }
      }
    }
  }

  // FP8: S -> P as e4m3 bytes in the A-operand layout of a 32-key K step, without moving values
  // between threads. A thread's A register (r, h) of step kk holds four adjacent slots
  // 16h + 4(lane % 4) + {0..3}; it gets the thread's own accumulator columns 8v + {0, 1} for
  // v = 4kk + 2h and 4kk + 2h + 1. So slot s of a 32-key group multiplies key
  // kernels::fp8_pv_key_of_slot(s), and launch_fp8_transpose_v lays V's keys out in that order.
  template <class TensorS, class TensorP>
  __device__ static void convert_p_fp8(const TensorS& s, TensorP& p) {
    uint32_t* p32 = reinterpret_cast<uint32_t*>(raw_pointer_cast(p.data()));
    CUTE_UNROLL
    for (int kk = 0; kk < kBlockN / 32; ++kk) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          const int idx = p.layout()(make_coord(make_coord(0, r, h), 0, kk));
          const int v = 4 * kk + 2 * h;
          p32[idx / 4] = pack4_e4m3(s(make_coord(0, r, v), 0, 0), s(make_coord(1, r, v), 0, 0),
                                    s(make_coord(0, r, v + 1), 0, 0),
                                    s(make_coord(1, r, v + 1), 0, 0));
        }
      }
    }
  }

  __device__ static void consume(const Params& p, const KvParams* kvs, Storage& ss,
                                 const TileInfo& t, int ctid) {
    const JobParams& job = p.jobs[t.job];
    const int wg = ctid / 128;
    const int warp = (ctid % 128) / 32;
    const int lane = ctid % 32;
    const int col0 = 2 * (lane % 4);  // first column of this thread in each 8-column group
    int row_in_tile[2];
    row_in_tile[0] = wg * 64 + warp * 16 + lane / 4;
    row_in_tile[1] = row_in_tile[0] + 8;

    KvCursor<kBlockN> cur;
    cur.start(job, kvs, t);
    // The state already holds the answer (a fresh one still needs its empty state written);
    // with a final output it still has to be converted. The producer loads nothing for such a
    // tile (no Q either), so nothing here waits on it.
    if (!cur.valid() && p.accumulate && !job.fresh) {
      if (job.final_o != nullptr) finalize_tile(job, t, row_in_tile, col0);
      return;
    }

    typename Traits::TiledMmaQK mma_qk;
    typename Traits::TiledMmaPV mma_pv;
    auto thr_qk = mma_qk.get_slice(ctid);
    auto thr_pv = mma_pv.get_slice(ctid);
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);    // descriptors
    Tensor tSrK = thr_qk.partition_fragment_B(sK);    // descriptors, per stage
    Tensor tOrVt = thr_pv.partition_fragment_B(sVt);  // descriptors, per stage
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    Tensor tOrP =
        make_tensor<Element>(partition_shape_A(mma_pv, Shape<Int<kBlockM>, Int<kBlockN>>{}));
    static_assert(decltype(size<0, 0>(tSrS))::value == 2 &&
                      decltype(size<0, 1>(tSrS))::value == 2 &&
                      decltype(size<0, 2>(tSrS))::value == kBlockN / 8 &&
                      decltype(size<1>(tSrS))::value == 1 && decltype(size<2>(tSrS))::value == 1,
                  "S accumulator: ((2 cols, 2 rows, N/8 col groups), 1, 1) per thread");
    static_assert(decltype(size<0, 2>(tOrO))::value == kHeadDim / 8, "O accumulator layout");
    if constexpr (Traits::kFp8) {
      static_assert(decltype(size<0, 0>(tOrP))::value == 4 &&
                        decltype(size<0, 1>(tOrP))::value == 2 &&
                        decltype(size<0, 2>(tOrP))::value == 2 &&
                        decltype(size<2>(tOrP))::value == kBlockN / 32,
                    "P operand (FP8): ((4,2,2), 1, N/32) per thread");
    } else {
      static_assert(
          decltype(size<0>(tOrP))::value == 8 && decltype(size<2>(tOrP))::value == kBlockN / 16,
          "P operand: ((2,2,2), 1, N/16) per thread");
    }
    static_assert(decltype(stride<0, 0>(tOrP))::value == 1, "P's adjacent slots adjacent");

    // Running state per row: max in log2 units, this thread's part of the row sum.
    float row_max[2], row_sum[2];
    if (p.accumulate && !job.fresh) {
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int64_t row = t.row_begin + row_in_tile[r];
        float lse = -INFINITY;
        if (row < t.lq)
          lse = job.lse[t.b * job.lse_stride_b + t.h * job.lse_stride_h + row * job.lse_stride_l];
        const float* orow = static_cast<const float*>(job.o) + t.b * job.o_stride_b +
                            row * job.o_stride_l + t.h * job.o_stride_h;
        CUTE_UNROLL
        for (int v = 0; v < kHeadDim / 8; ++v) {
          float2 x = make_float2(0.0f, 0.0f);
          if (lse != -INFINITY) x = *reinterpret_cast<const float2*>(orow + col0 + 8 * v);
          tOrO(make_coord(0, r, v), 0, 0) = x.x;
          tOrO(make_coord(1, r, v), 0, 0) = x.y;
        }
        row_max[r] = lse == -INFINITY ? -INFINITY : lse * kLog2e;
        row_sum[r] = (lse != -INFINITY && lane % 4 == 0) ? 1.0f : 0.0f;  // one share per row
      }
    } else {
      clear(tOrO);
      row_max[0] = row_max[1] = -INFINITY;
      row_sum[0] = row_sum[1] = 0.0f;
    }

    // FP8: the per-head descales (the scores' and the output's).
    float out_scale = 1.0f;
    if constexpr (Traits::kFp8) out_scale = p.descale_v[t.hkv];
    if (cur.valid()) {
      float scale_log2 = p.scale_log2;
      if constexpr (Traits::kFp8) scale_log2 *= p.descale_q[t.h] * p.descale_k[t.hkv];
      float correction[2];
      int limit[2];
      auto set_limits = [&](const KvCursor<kBlockN>& c) {
        const KvParams& kv = kvs[c.chunk];
        CUTE_UNROLL
        for (int r = 0; r < 2; ++r) {
          const int64_t last = last_visible_key(kv, t.row_begin + row_in_tile[r]);
          limit[r] = int(last - int64_t(c.n) * kBlockN);  // may be < 0 or >= kBlockN
        }
      };
      // Mask limits of a block are computed before its S GEMM is issued, while no S
      // accumulator is live (the 64-bit divisions cost ~60 registers at the softmax).
      auto to_p = [](const auto& s_acc, auto& p_op) {
        if constexpr (Traits::kFp8) {
          convert_p_fp8(s_acc, p_op);
        } else {
          convert_p(s_acc, p_op);
        }
      };
      auto softmax = [&](const KvCursor<kBlockN>& c) {
        if (c.need_mask()) {
          softmax_block<true>(tSrS, row_max, row_sum, correction, scale_log2, col0, limit);
        } else {
          softmax_block<false>(tSrS, row_max, row_sum, correction, scale_log2, col0, limit);
        }
      };

      mbar_wait<WaitPoint::kQ>(&ss.q_full, 0);
      PipeState ps;
      // First block: S only.
      if (cur.need_mask()) set_limits(cur);
      mbar_wait<WaitPoint::kKFull>(&ss.k_full[ps.index], ps.phase);
      constexpr int kGroups = Traits::kNumMmaWarpGroups;
      // Ping-pong: every group takes one turn a GEMM issue point, group 0 first (it does not
      // wait for its first turn, and waits once more at the end for the last group's last pass,
      // so every barrier's arrivals and syncs pair up before the CTA exits).
      if constexpr (Traits::kPingPong) {
        if (wg != 0) turn_wait(wg);
      }
      gemm_ss_zero(mma_qk, tSrQ, tSrK(_, _, _, ps.index), tSrS);
      if constexpr (Traits::kPingPong) turn_pass<kGroups>(wg);
      warpgroup_wait<0>();
      if (lane == 0) mbar_arrive(&ss.k_empty[ps.index]);
      softmax(cur);
      rescale(tOrO, correction);
      to_p(tSrS, tOrP);
      PipeState pv = ps;
      ps.template advance<kStages>();
      cur.advance(kvs);

      // Both waits come before the two GEMMs: a wait loop between WGMMA issues makes ptxas
      // serialize them (C7518, seen).
      for (; cur.valid(); cur.advance(kvs)) {
        if (cur.need_mask()) set_limits(cur);
        mbar_wait<WaitPoint::kKFull>(&ss.k_full[ps.index], ps.phase);
        mbar_wait<WaitPoint::kVFull>(&ss.v_full[pv.index], pv.phase);
        if constexpr (Traits::kPingPong) turn_wait(wg);
        if constexpr (Traits::kFreshQDescriptors) {
          uint32_t q_addr = smem_u32(ss.q.data());
          asm volatile("" : "+r"(q_addr));
          Tensor sQ_now = make_tensor(
              make_smem_ptr(static_cast<Element*>(__cvta_shared_to_generic(q_addr))),
              typename Traits::SmemLayoutQ{});
          gemm_ss_zero(mma_qk, thr_qk.partition_fragment_A(sQ_now), tSrK(_, _, _, ps.index), tSrS);
        } else {
          gemm_ss_zero(mma_qk, tSrQ, tSrK(_, _, _, ps.index), tSrS);
        }
        gemm_rs(mma_pv, tOrP, tOrVt(_, _, _, pv.index), tOrO);
        if constexpr (Traits::kPingPong) turn_pass<kGroups>(wg);
        warpgroup_wait<1>();  // S done, PV may still run
        if (lane == 0) mbar_arrive(&ss.k_empty[ps.index]);
        softmax(cur);
        warpgroup_wait<0>();  // PV done
        if (lane == 0) mbar_arrive(&ss.v_empty[pv.index]);
        rescale(tOrO, correction);
        to_p(tSrS, tOrP);
        pv = ps;
        ps.template advance<kStages>();
      }
      // Last block: PV only.
      mbar_wait<WaitPoint::kVFull>(&ss.v_full[pv.index], pv.phase);
      if constexpr (Traits::kPingPong) turn_wait(wg);
      gemm_rs(mma_pv, tOrP, tOrVt(_, _, _, pv.index), tOrO);
      if constexpr (Traits::kPingPong) {
        turn_pass<kGroups>(wg);
        if (wg == 0) turn_wait(wg);
      }
      warpgroup_wait<0>();
      if (lane == 0) mbar_arrive(&ss.v_empty[pv.index]);
    }
    epilogue(p, job, t, tOrO, row_max, row_sum, row_in_tile, col0, lane, out_scale);
    if constexpr (kVarlen) {
      if (t.m_block == job.num_m_blocks - 1) poison_unreached_rows(job, t, ctid);
    }
  }

  // Varlen: the rows of a sequence longer than max_seqlen_q (past the grid's reach) get NaN in o
  // and lse, so a wrong max_seqlen_q shows instead of leaving whatever the buffer held.
  __device__ static void poison_unreached_rows(const JobParams& job, const TileInfo& t, int ctid) {
    const int first = job.num_m_blocks * kBlockM;
    for (int64_t i = ctid; i < int64_t(t.lq - first) * kHeadDim; i += Traits::kNumConsumerThreads) {
      const int64_t row = t.q_offset + first + i / kHeadDim;
      const int d = int(i % kHeadDim);
      static_cast<OutElement*>(job.o)[row * job.o_stride_l + t.h * job.o_stride_h + d] =
          OutElement(NAN);
      if (d == 0 && job.lse != nullptr)
        job.lse[t.h * job.lse_stride_h + row * job.lse_stride_l] = NAN;
    }
  }

  // A tile whose state no key changes: final_o = state O in the element type, rows with lse =
  // -inf give 0 (finalize's result: the state is already normalized). The lse stays as it is.
  // Same thread-to-element mapping as the epilogue.
  __device__ static void finalize_tile(const JobParams& job, const TileInfo& t,
                                       const int (&row_in_tile)[2], int col0) {
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int64_t row = t.row_begin + row_in_tile[r];
      if (row >= t.lq) continue;
      const float lse =
          job.lse[t.b * job.lse_stride_b + t.h * job.lse_stride_h + row * job.lse_stride_l];
      const float* orow = static_cast<const float*>(job.o) + t.b * job.o_stride_b +
                          row * job.o_stride_l + t.h * job.o_stride_h;
      OutElement* out = static_cast<OutElement*>(job.final_o) + t.b * job.final_o_stride_b +
                     row * job.final_o_stride_l + t.h * job.final_o_stride_h;
      CUTE_UNROLL
      for (int v = 0; v < kHeadDim / 8; ++v) {
        float2 x = make_float2(0.0f, 0.0f);
        if (lse != -INFINITY) x = *reinterpret_cast<const float2*>(orow + col0 + 8 * v);
        *reinterpret_cast<uint32_t*>(out + col0 + 8 * v) = pack2<OutElement>(x.x, x.y);
      }
    }
  }

  template <class TensorO>
  __device__ static void epilogue(const Params& p, const JobParams& job, const TileInfo& t,
                                  TensorO& o, const float (&row_max)[2], const float (&row_sum)[2],
                                  const int (&row_in_tile)[2], int col0, int lane,
                                  float out_scale) {
    CUTE_UNROLL
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? out_scale / sum : 0.0f;
      const float lse = sum > 0.0f ? (row_max[r] + __log2f(sum)) * kLn2 : -INFINITY;
      if (t.row_begin + row_in_tile[r] >= t.lq) continue;
      const int64_t row = t.q_offset + t.row_begin + row_in_tile[r];  // in the tensors
      if (p.accumulate && job.final_o == nullptr) {
        float* orow = static_cast<float*>(job.o) + t.b * job.o_stride_b + row * job.o_stride_l +
                      t.h * job.o_stride_h;
        CUTE_UNROLL
        for (int v = 0; v < kHeadDim / 8; ++v) {
          *reinterpret_cast<float2*>(orow + col0 + 8 * v) =
              make_float2(o(make_coord(0, r, v), 0, 0) * inv, o(make_coord(1, r, v), 0, 0) * inv);
        }
      } else {
        // Forward's o, or the state's last fold writing its final output (same values as
        // writing the f32 state and finalizing it: O * inv, rounded to nearest).
        OutElement* orow =
            p.accumulate ? static_cast<OutElement*>(job.final_o) + t.b * job.final_o_stride_b +
                               row * job.final_o_stride_l + t.h * job.final_o_stride_h
                         : static_cast<OutElement*>(job.o) + t.b_mem * job.o_stride_b +
                               row * job.o_stride_l + t.h * job.o_stride_h;
        CUTE_UNROLL
        for (int v = 0; v < kHeadDim / 8; ++v) {
          *reinterpret_cast<uint32_t*>(orow + col0 + 8 * v) = pack2<OutElement>(
              o(make_coord(0, r, v), 0, 0) * inv, o(make_coord(1, r, v), 0, 0) * inv);
        }
      }
      if (lane % 4 == 0 && job.lse != nullptr)
        job.lse[t.b_mem * job.lse_stride_b + t.h * job.lse_stride_h + row * job.lse_stride_l] = lse;
    }
  }
};

template <class Traits, bool kVarlen>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    attention_sm90_kernel(const __grid_constant__ AttentionParams<Traits> params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Kernel = AttentionKernel<Traits, kVarlen>;
  using Storage = SharedStorage<Traits>;
  extern __shared__ char smem_raw[];
  // SW128 tiles need 1024-byte alignment; the dynamic allocation has 1024 bytes of slack.
  Storage& ss = *reinterpret_cast<Storage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                            ~uintptr_t(1023));
  const int warp_group = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  const int warp_in_group = __shfl_sync(0xffffffffu, (int(threadIdx.x) / 32) % 4, 0);
  const TileInfo tile = locate_tile<Traits, kVarlen>(params);
  // Varlen: the grid covers the longest sequence; a tile past this one's rows has nothing to do.
  if constexpr (kVarlen) {
    if (tile.row_begin >= tile.lq) return;
  }

  if (threadIdx.x == 0) {
    if constexpr (kVarlen) {
      KvParams& kv = ss.varlen_kv;
      kv = params.kv[0];
      kv.lkv = tile.lkv;
      kv.q_start = kv.causal ? int64_t(tile.lkv) - tile.lq : 0;  // bottom-right aligned
      kv.kv_start = 0;
      kv.q_stride = kv.kv_stride = 1;
    }
    mbar_init(&ss.q_full, 1);
    for (int s = 0; s < Traits::kStages; ++s) {
      mbar_init(&ss.k_full[s], 1);
      mbar_init(&ss.v_full[s], 1);
      mbar_init(&ss.k_empty[s], Traits::kNumConsumerWarps);
      mbar_init(&ss.v_empty[s], Traits::kNumConsumerWarps);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const KvParams* kvs;
  if constexpr (kVarlen) {
    kvs = &ss.varlen_kv;
  } else {
    kvs = params.kv;
  }

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
    if (warp_in_group == 0 && cute::elect_one_sync()) {
      cute::prefetch_tma_descriptor(&params.q_desc[tile.job]);
      Kernel::produce(params, kvs, ss, tile);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
    Kernel::consume(params, kvs, ss, tile, int(threadIdx.x) - 128);
  }
#else
  if (threadIdx.x == 0 && blockIdx.x == 0) printf("tessera attn: kernel built without sm_90a\n");
#endif
}

// ---- Host launcher ----------------------------------------------------------------------------

template <class Traits>
void launch_attention(const LaunchDesc& d) {
  using Element = typename Traits::Element;
  using Params = AttentionParams<Traits>;
  using Kernel = AttentionKernel<Traits, false>;  // kSmemBytes: the same for both forms
  TESSERA_CHECK(d.head_dim == Traits::kHeadDim && d.num_jobs >= 1 && d.num_kv >= 1 &&
                    d.num_jobs <= kMaxJobsPerLaunch && d.num_kv <= kMaxChunksPerLaunch,
                ErrorCode::kInternal, "attention launch: head dim ", d.head_dim, ", ", d.num_jobs,
                " jobs, ", d.num_kv, " chunks");
  Params p;
  p.batch = int(d.batch);
  p.heads_q = int(d.heads_q);
  p.heads_kv = int(d.heads_kv);
  p.group = int(d.heads_q / d.heads_kv);
  p.scale_log2 = d.softmax_scale * kLog2e;
  p.accumulate = d.accumulate ? 1 : 0;
  p.num_jobs = d.num_jobs;
  const bool varlen = d.cu_seqlens_q != nullptr;
  if constexpr (Traits::kFp8) {
    TESSERA_CHECK(!varlen && !d.accumulate && d.descale_q && d.descale_k && d.descale_v,
                  ErrorCode::kInternal, "attention launch: FP8 takes forward with descales");
    p.descale_q = d.descale_q;
    p.descale_k = d.descale_k;
    p.descale_v = d.descale_v;
  }
  TESSERA_CHECK(!varlen || (d.num_jobs == 1 && d.num_kv == 1 && !d.accumulate),
                ErrorCode::kInternal, "attention launch: varlen takes one forward job and chunk");
  p.cu_q = d.cu_seqlens_q;
  p.cu_k = d.cu_seqlens_k;
  p.tma_batch = varlen ? 1 : p.batch;
  int m_blocks = 0;
  for (int j = 0; j < d.num_jobs; ++j) {
    const JobLaunch& in = d.jobs[j];
    auto tma = make_tma_q<Traits>(static_cast<const Element*>(in.q.data), int(in.q.len), p.heads_q,
                                  p.tma_batch, in.q.stride_l, in.q.stride_h, in.q.stride_b);
    if (j == 0) p.tma_q = tma;
    p.q_desc[j] = *tma.get_tma_descriptor();
    JobParams& out = p.jobs[j];
    out.lq = int(in.q.len);
    out.m_block_begin = m_blocks;
    // Varlen: enough tiles for the longest sequence (in.q.len is the packed total).
    const int64_t rows = varlen ? std::min(d.max_seqlen_q, in.q.len) : in.q.len;
    out.num_m_blocks = int((rows + Traits::kBlockM - 1) / Traits::kBlockM);
    m_blocks += out.num_m_blocks;
    out.kv_begin = in.kv_begin;
    out.kv_end = in.kv_end;
    out.o = in.o;
    out.o_stride_b = in.o_stride_b;
    out.o_stride_l = in.o_stride_l;
    out.o_stride_h = in.o_stride_h;
    out.lse = in.lse;
    out.lse_stride_b = in.lse_stride_b;
    out.lse_stride_h = in.lse_stride_h;
    out.lse_stride_l = in.lse_stride_l;
    out.fresh = in.fresh ? 1 : 0;
    out.final_o = p.accumulate ? in.final_o : nullptr;
    out.final_o_stride_b = in.final_o_stride_b;
    out.final_o_stride_l = in.final_o_stride_l;
    out.final_o_stride_h = in.final_o_stride_h;
  }
  for (int c = 0; c < d.num_kv; ++c) {
    const KvLaunchChunk& in = d.kv[c];
    auto tk = make_tma_k<Traits>(static_cast<const Element*>(in.k.data), int(in.k.len), p.heads_kv,
                                 p.tma_batch, in.k.stride_l, in.k.stride_h, in.k.stride_b);
    auto tv = make_tma_vt<Traits>(static_cast<const Element*>(in.v.data), int(in.v.len), p.heads_kv,
                                  p.tma_batch, in.v.stride_l, in.v.stride_h, in.v.stride_b);
    if (c == 0) {
      p.tma_k = tk;
      p.tma_vt = tv;
    }
    p.k_desc[c] = *tk.get_tma_descriptor();
    p.v_desc[c] = *tv.get_tma_descriptor();
    KvParams& out = p.kv[c];
    out.lkv = int(in.k.len);
    out.causal = in.mask.causal ? 1 : 0;
    out.q_start = in.mask.q_start;
    out.q_stride = in.mask.q_stride;
    out.kv_start = in.mask.kv_start;
    out.kv_stride = in.mask.kv_stride;
  }
  if (m_blocks == 0 || d.batch == 0 || d.heads_q == 0) return;

  auto kernel = varlen ? attention_sm90_kernel<Traits, true> : attention_sm90_kernel<Traits, false>;
  // The dynamic shared-memory limit is raised once per device and form.
  static std::atomic<uint64_t> raised_on_devices[2] = {0, 0};
  ::tessera::kernels::raise_smem_limit_once(kernel, int(Kernel::kSmemBytes),
                                            raised_on_devices[varlen ? 1 : 0]);
  dim3 grid(unsigned(m_blocks), unsigned(d.heads_q), unsigned(d.batch));
  kernel<<<grid, Traits::kNumThreads, Kernel::kSmemBytes,
           static_cast<cudaStream_t>(d.cuda_stream)>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::attn::kernels::sm90
