// LlamaGpuModel: the Llama-family decoder of llama_model.h (Llama 2/3, Qwen2.5) on the cuda
// backend, bf16 (or fp16) weights, activations and KV cache with fp32 accumulation, on one
// tensor-parallel rank of P (the same Megatron split; the all-reduces through the
// Communicator, NCCL on cuda).
//
// Per layer, on one stream:
//   h = rms_norm(x + residual)                  ops.h, residual fused
//   qkv = h [Wq; Wk; Wv]^T (+ b)                one GEMM (gemm::Gemm: Tessera's Hopper kernel or
//                                               cuBLASLt by the measured rule)
//   q, k = rope(q, k)                           in place in qkv
//   cache rows <- k, v                          scatter_rows into the paged cache
//   attn = prefill: the Hopper attention kernels, causal: a run of prompts in adjacent rows in
//                   one varlen launch; a chunk after cached tokens over its sequence's cache
//                   rows (gathered from the pages), causal from its first position
//          decode:  split-KV attention over the paged cache (FlashDecoding-style, the
//                   unfused decode path's kernel), one launch for a run of decode sequences
//   x = attn Wo^T (all-reduced over the ranks)
// With LlamaGpuOptions::fused_decode, a batch of decodes only runs QKV through the output
// projection as one kernel instead, the fused attention block of decode/attention_block.h
// (ClusterFusion's dataflow), where it takes the model (head_dim 128, 1/2/4/8 query heads per
// KV head, no q/k/v bias).
//   h = rms_norm(x + residual); x = (silu(h Wg^T) * h Wu^T) Wd^T (all-reduced), gate and up one
//   GEMM
// then the final norm and lm_head on the rows whose logits are asked for only.
//
// A forward() takes prefills (a new sequence's prompt from position 0, or a chunk of tokens
// after what it has cached: chunked prefill, prefix reuse) and decodes (one token after what
// the sequence has cached) in one batch. A batch of decodes only is replayed from a CUDA graph
// per batch size (captured at the second step of that size, after an eager step made every
// plan): the same kernels as eagerly, so the same bits.
//
// Errors: kInvalidArgument naming the input or option; kUnsupported without the cuda backend or
// for shapes the kernels do not take (head_dim 64 or 128 for prefill attention).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/model/llama_model.h"
#include "tessera/model/llama_weights.h"
#include "tessera/runtime/stream.h"

namespace tessera::model {

struct LlamaGpuOptions {
  int device = 0;
  DType dtype = DType::kBF16;   // weights, activations and KV cache: bf16 or f16
  KvCacheSize cache;            // pages of the KV cache (every layer's keys and values)
  int64_t max_tokens = 4096;    // rows of one forward() (sizes the activation buffers)
  int64_t max_batch = 64;       // inputs of one forward()
  int64_t max_context = 4096;   // the longest a sequence grows (decode's split-KV plan)
  int64_t max_logit_rows = 64;  // rows one forward() returns logits for
  // Replay decode-only batches from CUDA graphs (with tensor parallelism where the
  // communicator's collectives can be captured: Communicator::graph_capturable).
  bool cuda_graphs = true;
  // Decode-only batches through the fused attention-block kernel (decode/attention_block.h)
  // where it takes the model. Off by default: on an H100 it measured slower than the layer's own
  // operations for Llama-3-8B at context 4096 (docs/PERF.md).
  bool fused_decode = false;
};

enum class LogitRows {
  kLast,  // each input's last new token (what decoding needs)
  kAll,   // every new token, packed in input order
};

class LlamaGpuModel {
 public:
  // weights: this rank's source (random_llama_source / store_llama_source), uploaded layer by
  // layer. comm: the tensor-parallel group of P ranks, or null for P = 1.
  LlamaGpuModel(const DecoderConfig& config, const LlamaTensorSource& weights,
                const LlamaGpuOptions& options, Communicator* comm);
  ~LlamaGpuModel();
  LlamaGpuModel(const LlamaGpuModel&) = delete;
  LlamaGpuModel& operator=(const LlamaGpuModel&) = delete;

  const LlamaShapes& shapes() const;
  const LlamaGpuOptions& options() const;
  const Stream& stream() const;
  // Bytes of this rank's weights on the GPU (what a decode step reads at least once).
  int64_t weight_bytes() const;

  int64_t add_sequence();
  void release_sequence(int64_t seq_id);
  int64_t length(int64_t seq_id) const;

  // Appends each input's tokens to its sequence and returns the logits of `rows`, f32 [R, V]
  // row-major on the host. Throws kInvalidArgument naming the input (unknown or repeated
  // seq_id, a token outside [0, V), more rows or inputs than planned, a context above
  // max_context, the cache out of pages); nothing is cached then.
  // With `strategy` (tessera/sched/schedule.h) the layers' operations run split into its
  // nano-batches and in its order, each kind on its stream (compute on stream(), memory-bound
  // and network operations on two more), cross-stream dependencies as events and no host
  // synchronization inside the step; decode-only steps replay a CUDA graph per (batch size,
  // strategy). The logits match the unscheduled step's within rounding (GEMM and split-KV
  // plans depend on the rows they get), not bitwise. A strategy's fused group (TokenWeave's
  // all-reduce + RMSNorm) runs as NCCL reduce-scatter, the norm on this rank's rows and
  // all-gathers of h and the residual (TokenWeave fuses those into one kernel; not built).
  std::vector<float> forward(std::span<const SequenceTokens> inputs,
                             LogitRows rows = LogitRows::kLast,
                             const sched::Strategy* strategy = nullptr);
  // The same, returning each input's next token (the argmax of its last row, taken on the GPU).
  std::vector<int32_t> forward_greedy(std::span<const SequenceTokens> inputs,
                                      const sched::Strategy* strategy = nullptr);
  // Forgets what `seq_id` cached beyond its first `length` positions (a benchmark repeating a
  // step puts the sequences back). Throws kInvalidArgument for an unknown sequence or a length
  // above what it holds.
  void truncate(int64_t seq_id, int64_t length);
  // The host time of the last forward's launches (from its inputs' upload to the last launch or
  // graph replay, before the wait for its results), in microseconds.
  double last_step_host_us() const;
  // While set, each scheduled forward runs eagerly (no CUDA graph) with timing events around
  // each operation and replaces `timeline`'s spans with them (microseconds from the step's
  // fork, on the stream each ran on); nullptr stops recording. The caller keeps it alive while
  // set.
  void set_timeline(sched::Timeline* timeline);
  // Prefill `prompt` in a new sequence, then `steps` greedy tokens; the sequence is released.
  std::vector<int32_t> generate_greedy(const std::vector<int32_t>& prompt, int64_t steps);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::model
