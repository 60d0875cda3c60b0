// Variable-length attention (FlashAttention's varlen API): B sequences of different lengths
// packed along one token axis, described by cumulative lengths. forward_varlen runs it on a
// stream (cpu: the float32 reference; cuda: the sm90 attention kernel, a CTA per (query tile,
// head, sequence)); the reference is what both are checked against.
//
// Layouts (unit stride in D, any other strides):
//   q [total_q, Hq, D]   k, v [total_k, Hkv, D]   Hq % Hkv == 0
//   cu_seqlens_q, cu_seqlens_k: i32 [B + 1], cu[0] = 0, non-decreasing, cu[B] = total
// Sequence b owns query rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] (Lq_b of them) and key rows
// cu_seqlens_k[b] .. cu_seqlens_k[b+1] (Lk_b); it attends within itself only. Lengths may be 0:
// a query row that sees no key gets o = 0 and lse = -inf (attention.h's rule).
// max_seqlen_q / max_seqlen_k must be >= every Lq_b / Lk_b (a kernel sizes its grid by them).
//
// Causal masking is aligned to the bottom-right corner, as FlashAttention >= 2.1: query i of
// sequence b sees key j when j <= i + Lk_b - Lq_b, so the last query sees every key, and
// with Lq_b > Lk_b the first Lq_b - Lk_b queries see none (the usual decode/prefill-with-cache
// case: new queries sit after the cached keys). Equal lengths give the plain causal mask.
// In MaskSpec terms: causal_at(q_start = Lk_b - Lq_b, kv_start = 0).
#pragma once

#include <vector>

#include "tessera/attn/reference.h"
#include "tessera/runtime/stream.h"

namespace tessera::attn {

// Rows [start, start + len) of a packed [total, H, D] tensor as the batch [1, len, H, D] (a view:
// what one sequence of a varlen batch is to the batched entries of attention.h).
TensorView packed_rows(const TensorView& packed, int64_t start, int64_t len);

struct VarlenReferenceResult {
  int64_t total_q = 0, heads = 0, head_dim = 0;
  std::vector<float> o;    // [total_q, Hq, D] contiguous, normalized
  std::vector<float> lse;  // [Hq, total_q] contiguous (FlashAttention's varlen layout)

  float o_at(int64_t t, int64_t h, int64_t d) const {
    return o[size_t((t * heads + h) * head_dim + d)];
  }
  float lse_at(int64_t h, int64_t t) const { return lse[size_t(h * total_q + t)]; }
};

// Every sequence of the packed batch through reference_attention (same float32 order as
// running it alone as a [1, Lq_b, Hq, D] batch). Throws kInvalidArgument naming the argument
// (and the index of a bad cu_seqlens entry).
VarlenReferenceResult reference_attention_varlen(
    const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& cu_seqlens_q,
    const TensorView& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal,
    float softmax_scale, ReferencePrecision precision = ReferencePrecision::kFloat32);

// o [total_q, Hq, D] (q's dtype, unit stride in D) = attention of each sequence over its own
// keys; lse f32 [Hq, total_q] (any strides) or an empty view (not written). Same layouts,
// masks and empty-sequence rule as above.
//   cpu stream: every tensor on the cpu; cu_seqlens are checked in full (as the reference).
//   cuda stream: q, k, v, o, lse and cu_seqlens (contiguous i32) on the stream's device; bf16 or
//   f16, head dim 64, 128 or 256, 16-byte aligned rows (the attention kernels' rules). The
//   kernel reads cu_seqlens on the device, so the host checks their count, not their values
//   (that would synchronize): entries outside [0, total] are clamped to it, and the rows of a
//   sequence longer than max_seqlen_q past max_seqlen_q come out NaN. A key tile that runs past
//   its sequence's end reads the next sequence's k/v rows and masks them (probability 0), so
//   the packed k and v must be finite everywhere, as for FlashAttention's varlen: a NaN there
//   can reach a neighbouring sequence's output (0 x NaN). Neither allocates nor synchronizes;
//   a CUDA graph may capture it.
void forward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                    int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal, float softmax_scale,
                    const TensorView& o, const TensorView& lse, const Stream& stream);

}  // namespace tessera::attn
