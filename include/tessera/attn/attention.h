// Local attention: the leaf every sequence-parallel method calls (a ring step, a Torus stage, a
// Mesh block). One API for both backends: tensors on cpu run the float32 reference
// (reference.h), tensors on cuda run the Hopper kernels (kernels/attn/, sm_90a).
//
// Layouts (strides in elements, unit stride in D, any other strides, so slices of larger
// buffers work without copies):
//   q [B, Lq, Hq, D]     k, v [B, Lkv, Hkv, D]     Hq % Hkv == 0 (GQA / MQA with any ratio)
//   o [B, Lq, Hq, D]     lse f32 [B, Hq, Lq]       (natural-log log-sum-exp of the scaled scores)
// Attention of query row i (head h) over key rows j of every KV chunk given:
//   s_ij = softmax_scale * <q_i, k_j>,  o_i = sum_j exp(s_ij - lse_i) v_j,  lse_i = log sum_j
//   exp(s_ij)
// over the keys that are not masked; a row that sees no key gets o = 0 and lse = -inf.
//
// Chunked accumulation (what distributed attention needs): a running state per Q chunk, an
// f32 O [B, Lq, Hq, D] normalized over the keys folded so far plus its f32 lse [B, Hq, Lq].
// init_state() sets O = 0, lse = -inf; accumulate() folds one or several KV chunks into it in
// one launch (several (q, state) jobs may share a launch); finalize() writes the normalized
// bf16/fp16 output (or the state's last accumulate writes it: AccumulateJob::final_o); merge()
// combines (O, lse) partials. Every merge step is in fp32, so the error does not grow with the
// number of chunks:
//   lse = log(exp(lse_a) + exp(lse_b)),  O = O_a exp(lse_a - lse) + O_b exp(lse_b - lse).
//
// Streams: every call takes one; cpu streams run inline. cuda calls neither allocate nor
// synchronize (they can be captured in a CUDA graph). All tensors of a call must live on the
// stream's device.
//
// cuda backend limits (checked, kUnsupported otherwise): bf16 or fp16 q/k/v (FP8: fp8.h's
// forward_fp8), D in {64, 128, 256}, every base pointer 16-byte aligned and every stride
// except D's a multiple of 16 bytes (TMA's rule), for q, k, v, o, state.o and final_o; o and
// final_o have q's dtype. The cpu backend also takes f32 q/k/v/o and any D. Kernels and
// measurements: docs/attention-kernels.md.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"

namespace tessera::attn {

// Causal masking by global positions, so contiguous, striped and zigzag chunks of a sequence
// mask correctly wherever they are computed:
//   q_pos(i) = q_start + i * q_stride,  kv_pos(j) = kv_start + j * kv_stride,
//   (i, j) is masked when causal and kv_pos(j) > q_pos(i).
// Strides must be >= 1. Zigzag chunks (two contiguous pieces) are two KV chunks or two jobs.
struct MaskSpec {
  bool causal = false;
  int64_t q_start = 0;
  int64_t q_stride = 1;
  int64_t kv_start = 0;
  int64_t kv_stride = 1;

  static MaskSpec none() { return {}; }
  // Causal over positions q_start + i*q_stride and kv_start + j*kv_stride.
  static MaskSpec causal_at(int64_t q_start, int64_t kv_start, int64_t q_stride = 1,
                            int64_t kv_stride = 1) {
    return {true, q_start, q_stride, kv_start, kv_stride};
  }
  int64_t q_pos(int64_t i) const { return q_start + i * q_stride; }
  int64_t kv_pos(int64_t j) const { return kv_start + j * kv_stride; }
  bool masked(int64_t i, int64_t j) const { return causal && kv_pos(j) > q_pos(i); }
};

// One KV chunk with the mask that applies between it and the query of its call/job.
struct KvChunk {
  TensorView k;  // [B, Lkv, Hkv, D]
  TensorView v;  // [B, Lkv, Hkv, D], same shape and dtype as k
  MaskSpec mask;
};

// The running state of one Q chunk: O normalized over the keys folded so far, and its lse.
struct AttnState {
  TensorView o;    // f32 [B, Lq, Hq, D]
  TensorView lse;  // f32 [B, Hq, Lq]
};

// One Q chunk folding its own list of KV chunks into its own state.
struct AccumulateJob {
  TensorView q;  // [B, Lq, Hq, D]
  AttnState state;
  std::span<const KvChunk> kv;
  // The state holds nothing yet: start from the empty state instead of reading it (saves the
  // init_state launch and one read of O). The state's contents before the call do not matter.
  bool fresh = false;
  // Optional (an empty view: not used): this is the state's last fold, and the caller wants
  // the final output. [B, Lq, Hq, D] in q's dtype, the layout rules of q (cuda: 16-byte aligned
  // base and strides). The job folds its chunks as usual, then writes what
  // finalize(state, final_o) would write (rows with lse = -inf give 0) to final_o instead of
  // writing state.o: one pass over the state less than accumulate + finalize. state.lse is
  // still written (it stays correct); state.o's contents afterwards are unspecified. Works with
  // `fresh` and with an empty `kv` (then it is a finalize). final_o must not overlap q, the KV
  // chunks or the state.
  TensorView final_o{};
};

// One partial result to merge: O of any float dtype, lse f32.
struct Partial {
  TensorView o;    // [B, Lq, Hq, D]
  TensorView lse;  // f32 [B, Hq, Lq]
};

// 1 / sqrt(head_dim), the usual softmax scale.
float default_softmax_scale(int64_t head_dim);

// One launch folds at most this many jobs and KV chunks; larger calls are split into several
// launches in stream order (same result: the fold is sequential).
inline constexpr int kMaxJobsPerLaunch = 8;
inline constexpr int kMaxChunksPerLaunch = 32;

// o = attention(q, k, v) and lse (lse may be an empty TensorView: not written).
void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
             const TensorView& lse, const MaskSpec& mask, float softmax_scale,
             const Stream& stream);
// o, lse over the concatenation of several KV chunks (each with its own mask), one launch.
void forward(const TensorView& q, std::span<const KvChunk> kv, const TensorView& o,
             const TensorView& lse, float softmax_scale, const Stream& stream);

// state.o = 0, state.lse = -inf.
void init_state(const AttnState& state, const Stream& stream);
// Folds every chunk of `kv` into `state` (one launch for up to kMaxChunksPerLaunch chunks).
void accumulate(const TensorView& q, std::span<const KvChunk> kv, const AttnState& state,
                float softmax_scale, const Stream& stream);
// Several Q chunks, each with its own state and KV list, in one launch. All jobs share B, Hq,
// Hkv, D and dtype; Lq and Lkv may differ.
void accumulate(std::span<const AccumulateJob> jobs, float softmax_scale, const Stream& stream);
// o = state.o in o's dtype (bf16, fp16 or f32); rows with lse = -inf give 0.
void finalize(const AttnState& state, const TensorView& o, const Stream& stream);
// Whether `o` meets the backend's layout rules for AccumulateJob::final_o (cpu: any; cuda:
// 16-byte aligned base, strides multiples of 16 bytes). For callers that fall back to
// accumulate + finalize rather than fail (o may be a caller's tensor with any strides).
bool final_output_supported(const TensorView& o, const Stream& stream);
// o, lse = the merge of every partial (lse may be empty: not written). o of any float dtype;
// o and lse may be those of one of the partials (in-place merge). At most 64 partials on cuda.
void merge(std::span<const Partial> partials, const TensorView& o, const TensorView& lse,
           const Stream& stream);

// Pairs (i, j) that the mask leaves visible for Lq queries and Lkv keys (for FLOP counts).
int64_t visible_pairs(int64_t lq, int64_t lkv, const MaskSpec& mask);

}  // namespace tessera::attn
