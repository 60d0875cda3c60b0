// LlamaModel: a Llama-family decoder (Llama 2/3, Qwen2.5) on the cpu backend, float32, on one
// tensor-parallel rank of P: embedding, the decoder layers (LlamaLayer), the final RMSNorm and
// lm_head, over a PagedKvCache holding this rank's KV heads. Embedding and lm_head are
// replicated, so every rank returns the full logits; ranks must make the same calls in the same
// order (the layers all-reduce).
//
// forward() runs any mix of prefill and decode: each sequence appends its new tokens after
// what it has cached. generate_greedy() is prefill then argmax decoding.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/context.h"
#include "tessera/model/llama_layer.h"
#include "tessera/model/llama_weights.h"
#include "tessera/model/paged_kv_cache.h"
#include "tessera/runtime/stream.h"
#include "tessera/tp/operation.h"

namespace tessera::sched {
class Strategy;
struct Timeline;
}

namespace tessera::model {

struct KvCacheSize {
  int64_t page_size = 16;
  int64_t num_pages = 64;
};

struct SequenceTokens {
  int64_t seq_id = 0;
  std::vector<int32_t> tokens;  // new tokens, each in [0, vocab_size)
};

// Each input's last new row of `logits` ([T, vocab], rows packed in input order, as forward()
// returns them): [inputs, vocab], what decoding reads.
std::vector<float> last_token_logits(std::span<const float> logits,
                                     std::span<const SequenceTokens> inputs, int64_t vocab);

class LlamaModel {
 public:
  // weights: this rank's (random_llama_weights / load_llama_weights for the same config, rank
  // and P). comm: the tensor-parallel group of P ranks, or null for P = 1.
  LlamaModel(const DecoderConfig& config, LlamaWeights weights, const KvCacheSize& cache_size,
             Communicator* comm);
  // The same on the ranks of `ctx` (its world the group, unused for P = 1). With a symmetric
  // heap in `ctx`, the "flux" strategy runs each row-parallel GEMM and its all-reduce as a fused
  // GEMM+ReduceScatter on it (tessera/tp/operation.h), made on first use per row count
  // (collectively: every rank runs the same steps).
  LlamaModel(const DecoderConfig& config, LlamaWeights weights, const KvCacheSize& cache_size,
             RankContext& ctx);

  const LlamaShapes& shapes() const { return shapes_; }
  PagedKvCache& cache() { return cache_; }
  int64_t add_sequence() { return cache_.add_sequence(); }
  void release_sequence(int64_t seq_id) { cache_.release_sequence(seq_id); }

  // Appends each input's tokens to its sequence and returns the logits of every new token,
  // f32 [T, V] row-major, rows packed in input order. Throws kInvalidArgument naming the input
  // (unknown or repeated seq_id, a token outside [0, V)) or when the cache is out of pages;
  // nothing is cached then.
  std::vector<float> forward(std::span<const SequenceTokens> inputs);
  // The same, with the layers' operations split into nano-batches and ordered by `strategy`
  // (tessera/sched/schedule.h): bitwise the same logits as forward(inputs).
  std::vector<float> forward(std::span<const SequenceTokens> inputs,
                             const sched::Strategy& strategy);
  // While set, each scheduled forward replaces `timeline`'s spans with its operations' (host
  // clock: the cpu backend runs them inline, so the streams are where a GPU would run them);
  // nullptr stops recording. The caller keeps it alive while set.
  void set_timeline(sched::Timeline* timeline) { timeline_ = timeline; }

  // Prefill `prompt` (non-empty) in a new sequence, then take the argmax token and feed it back,
  // `steps` times; returns those `steps` tokens. The sequence is released at the end.
  std::vector<int32_t> generate_greedy(const std::vector<int32_t>& prompt, int64_t steps);

 private:
  PackedBatch pack(std::span<const SequenceTokens> inputs) const;
  // Flux's fused GEMM+ReduceScatter for `gemm` (o_proj or down) over `rows` rows. Throws
  // kUnsupported without a context of several ranks with a symmetric heap.
  tp::TpOperation& row_parallel_op(LlamaOp gemm, int64_t rows);
  // forward()'s body around the layers: `layers(batch, x, residual)` runs them.
  template <typename RunLayers>
  std::vector<float> forward_with(std::span<const SequenceTokens> inputs, RunLayers&& layers);
  // forward_with()'s work once the batch's sequences are extended: embedding, layers, head.
  template <typename RunLayers>
  std::vector<float> run_extended(const PackedBatch& batch, std::span<const SequenceTokens> inputs,
                                  RunLayers&& layers);

  DecoderConfig config_;
  LlamaShapes shapes_;
  std::vector<float> embed_, final_norm_, lm_head_;
  std::vector<float> inv_freq_;
  std::vector<LlamaLayer> layers_;
  PagedKvCache cache_;
  Communicator* comm_ = nullptr;
  RankContext* ctx_ = nullptr;
  std::map<std::pair<LlamaOp, int64_t>, std::unique_ptr<tp::TpOperation>> row_parallel_ops_;
  Stream stream_ = Stream::cpu();
  sched::Timeline* timeline_ = nullptr;
};

}  // namespace tessera::model
