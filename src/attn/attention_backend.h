// Internal: what attention.cc hands the cuda backend after validating every argument.
// Implemented in src/attn/cuda/attention_cuda.cc (built only with TESSERA_CUDA=ON).
#pragma once

#include <span>

#include "tessera/attn/attention.h"
#include "tessera/attn/fp8.h"

namespace tessera::attn::detail {

// One Q chunk, its output and its KV chunks (all validated, all on the stream's device).
struct AttentionJob {
  TensorView q;    // [B, Lq, Hq, D]
  TensorView o;    // forward: q's dtype; accumulate: the f32 state O
  TensorView lse;  // f32 [B, Hq, Lq]; may be empty in forward
  std::span<const KvChunk> kv;
  bool fresh = false;  // accumulate: start from the empty state, do not read (o, lse)
  // accumulate: write the normalized output here (q's dtype) instead of the state's O; empty:
  // not used (AccumulateJob::final_o).
  TensorView final_o{};
};

#ifdef TESSERA_WITH_CUDA
// accumulate=false: o, lse = attention over the job's chunks. accumulate=true: folds them into
// the state (o, lse). Splits into launches of at most kMaxJobsPerLaunch jobs and
// kMaxChunksPerLaunch chunks.
void cuda_attention(std::span<const AttentionJob> jobs, bool accumulate, float softmax_scale,
                    const Stream& stream);
// Checks the cuda-only limits (dtype, head dim, alignment); throws kUnsupported naming `what`.
void cuda_check_supported(const TensorView& t, const char* what, bool is_qkv);
void cuda_init_state(const AttnState& state, const Stream& stream);
// The varlen forward (varlen.h) on validated packed tensors viewed as one batch: q, o
// [1, total_q, Hq, D], k, v [1, total_k, Hkv, D], lse f32 [1, Hq, total_q] or empty; cu_seqlens
// i32 [B + 1] on the stream's device.
void cuda_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                           int64_t max_seqlen_q, bool causal, float softmax_scale,
                           const TensorView& o, const TensorView& lse, const Stream& stream);
// forward_fp8 (fp8.h) on validated tensors; workspace holds fp8_workspace_bytes.
void cuda_attention_fp8(const TensorView& q, const TensorView& k, const TensorView& v,
                        const Fp8DescaleTensors& descales, const MaskSpec& mask,
                        float softmax_scale, const TensorView& o, const TensorView& lse,
                        const TensorView& workspace, const Stream& stream);
// o, lse = merge(partials); lse may be empty. Zero partials write o = 0, lse = -inf.
void cuda_merge(std::span<const Partial> partials, const TensorView& o, const TensorView& lse,
                const Stream& stream);
#endif

}  // namespace tessera::attn::detail
