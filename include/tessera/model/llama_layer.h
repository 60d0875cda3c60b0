// LlamaLayer: one Llama-family decoder layer (Llama 2/3, Qwen2.5) on the cpu backend, float32,
// on one tensor-parallel rank of P (Megatron's split, every rank running the same calls):
//
//   h      = rms_norm(x + residual)            residual := x + residual     (fused residual)
//   q,k,v  = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)    this rank's Hq/P, Hkv/P heads (GQA)
//   q,k    = rope(q, k) at each row's position           (Llama 3 scaling from the config)
//   cache  <- k, v at the rows' positions
//   a      = causal attention of q over the sequence's cached keys, softmax scale 1/sqrt(D)
//   x      = all_reduce_sum(a Wo^T)                       row-parallel: this rank's columns
//   h      = rms_norm(x + residual)            residual := x + residual
//   x      = all_reduce_sum((silu(h Wg^T) * h Wu^T) Wd^T) gate/up column-, down row-parallel
//
// Rows are a PackedBatch: several sequences of different lengths (prefill) or one new token each
// (decode), each attending to its own cached positions and its new ones (causal).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/model/llama_weights.h"
#include "tessera/model/model_config.h"
#include "tessera/model/packed_batch.h"
#include "tessera/model/paged_kv_cache.h"
#include "tessera/runtime/stream.h"

namespace tessera::model {

class LlamaLayer {
 public:
  // `shapes` from llama_shapes(config, rank, P); `inv_freq` from rope_inv_freq (shared by the
  // layers). Throws kInvalidArgument naming the weight whose size does not match the shapes.
  LlamaLayer(const DecoderConfig& config, const LlamaShapes& shapes, int64_t layer_idx,
             LlamaLayerWeights weights, const std::vector<float>* inv_freq);

  // x [T, C]: in, the previous layer's output (the embedding for layer 0, with residual zero);
  // out, this layer's output. residual [T, C] in/out. The cache must already hold positions up
  // to start + num_tokens of every sequence (PagedKvCache::extend) and is written at this
  // layer's index. comm: the tensor-parallel group (size P), or null when P = 1.
  void forward(const PackedBatch& batch, std::vector<float>& x, std::vector<float>& residual,
               PagedKvCache& cache, Communicator* comm, const Stream& stream) const;

 private:
  void attend(const PackedBatch& batch, const std::vector<float>& q, const PagedKvCache& cache,
              std::vector<float>& out) const;
  // out = the sum over ranks of `partial` (a copy when there is no group).
  void sum_over_ranks(std::vector<float>& partial, std::vector<float>& out, Communicator* comm,
                      const Stream& stream) const;

  LlamaShapes shapes_;
  int64_t layer_idx_ = 0;
  float eps_ = 0;
  LlamaLayerWeights w_;
  const std::vector<float>* inv_freq_ = nullptr;
};

}  // namespace tessera::model
