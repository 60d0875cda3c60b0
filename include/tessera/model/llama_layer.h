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
#include <string_view>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/model/llama_weights.h"
#include "tessera/model/model_config.h"
#include "tessera/model/packed_batch.h"
#include "tessera/model/paged_kv_cache.h"
#include "tessera/runtime/stream.h"

namespace tessera::tp {
class TpOperation;
}

namespace tessera::model {

// The layer's forward as logical operations, in order, each over a range of the batch's
// sequences (their rows are contiguous): what a scheduler (tessera/sched/) interleaves across
// nano-batches. Each reads what the one before it wrote for the same rows; the all-reduces are
// collectives over the tensor-parallel group.
enum class LlamaOp : int {
  kAttnNorm,      // h = rms_norm(x + residual)                memory
  kQkv,           // q, k, v = h W^T, RoPE, into the KV cache  compute
  kAttention,     // attn = attention over each sequence      memory
  kOProj,         // partial = attn Wo^T                       compute
  kOAllReduce,    // x = sum over ranks of partial             network
  kMlpNorm,       // h = rms_norm(x + residual)                memory
  kGateUp,        // gate = silu(h Wg^T) * h Wu^T              compute
  kDown,          // partial = gate Wd^T                       compute
  kMlpAllReduce,  // x = sum over ranks of partial             network
};
inline constexpr int kLlamaOps = 9;
enum class OpKind : uint8_t { kCompute, kMemory, kNetwork };
const char* llama_op_name(LlamaOp op);
// Parses llama_op_name's names; throws kInvalidArgument naming `what` and the known names.
LlamaOp parse_llama_op(std::string_view name, const char* what = "op");
OpKind llama_op_kind(LlamaOp op);

// The fused groups of a layer's chain, two steps each: strategies declare those they run
// (sched::Strategy::fused_groups) and a model refuses, before it runs anything, a strategy that
// needs one it does not build.
enum class FusedGroup : uint8_t {
  kAllReduceNorm,         // an all-reduce and the RMSNorm that reads it (TokenWeave)
  kRowParallelPair,       // a row-parallel GEMM and its all-reduce as GEMM+ReduceScatter (Flux)
  kRowParallelPipelined,  // that pair in row chunks, each chunk's all-reduce beside the next
                          // chunk's GEMM (single-batch overlap)
};
inline constexpr int kFusedGroupSteps = 2;
// Whether a group of `group`'s kind starts at `first` (the row-parallel ones at kOProj and
// kDown, the all-reduce+norm one at either all-reduce).
bool fused_group_starts_at(FusedGroup group, LlamaOp first);
// "all-reduce+RMSNorm", "row-parallel GEMM+all-reduce", "row-parallel GEMM+all-reduce in row
// chunks"
const char* fused_group_name(FusedGroup group);
// The all-reduce+norm group from layer `layer`'s all-reduce `first`: the layer the norm
// belongs to and the norm (the attention all-reduce's is this layer's kMlpNorm, the MLP
// all-reduce's the next layer's kAttnNorm). Throws kInvalidArgument naming the group when it
// is not one (`layers`: the chain's; the last layer's MLP all-reduce has no norm after it).
struct AllReduceNorm {
  int64_t layer = 0;
  LlamaOp norm = LlamaOp::kAttnNorm;
};
AllReduceNorm all_reduce_norm_group(int64_t layer, LlamaOp first, int64_t layers);
// Rows [begin, begin + count) of chunk i of `chunks` near-equal chunks of `rows` rows (a
// pipelined row-parallel pair's).
struct RowChunk {
  int64_t begin = 0, count = 0;
};
RowChunk row_chunk(int64_t rows, int chunks, int i);
const char* op_kind_name(OpKind kind);  // "compute", "memory", "network"

// The intermediate activations of one layer call, [T, width] each: nano-batches are row
// ranges of them (views).
struct LlamaLayerBuffers {
  std::vector<float> h, q, k, v, attn, partial, gate, up;
  void resize(const LlamaShapes& shapes, int64_t tokens);
};

// Sequences [begin, end) of a PackedBatch.
struct SequenceRange {
  size_t begin = 0, end = 0;
};

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

  // One logical operation on the rows of `range`'s sequences; forward() is every op in order on
  // all of them. x, residual [T, C] and `buffers` (resize()d for T) are the whole batch's.
  void run_op(LlamaOp op, const PackedBatch& batch, SequenceRange range, std::vector<float>& x,
              std::vector<float>& residual, LlamaLayerBuffers& buffers, PagedKvCache& cache,
              Communicator* comm, const Stream& stream) const;
  // TokenWeave's fused all-reduce and RMSNorm on the rows of `range`: `norm` is kMlpNorm (this
  // layer's post-attention norm, after the o_proj all-reduce) or kAttnNorm (its input norm,
  // after the previous layer's MLP all-reduce). partial's rows are reduce-scattered over the
  // group, each rank adds the residual and normalizes its share of them, and x, residual and h
  // are all-gathered: the same bits as the all-reduce then the norm (both sum in rank order).
  void run_all_reduce_norm(LlamaOp norm, const PackedBatch& batch, SequenceRange range,
                           std::vector<float>& x, std::vector<float>& residual,
                           LlamaLayerBuffers& buffers, Communicator* comm,
                           const Stream& stream) const;
  // Flux's form of a row-parallel pair on the rows of `range`: `gemm` (kOProj or kDown) and the
  // all-reduce after it as `rs`, a fused GEMM+ReduceScatter made for those rows ([t, K] x
  // [hidden, K/P]^T, f32, [N, K] weights), then an all-gather of each rank's reduced rows into
  // x: the same bits as the pair (the owner sums the partials in rank order, as the all-reduce).
  void run_row_parallel_fused(LlamaOp gemm, const PackedBatch& batch, SequenceRange range,
                              std::vector<float>& x, LlamaLayerBuffers& buffers,
                              tp::TpOperation& rs, Communicator& comm,
                              const Stream& stream) const;
  // Single-batch overlap's form of a row-parallel pair on the rows of `range`: `gemm` (kOProj
  // or kDown) and the all-reduce after it in `chunks` row chunks (row_chunk), each chunk's
  // all-reduce issued once its GEMM rows are done: the same bits as the pair (rows are
  // independent, the all-reduce sums per element in rank order).
  void run_row_parallel_pipelined(LlamaOp gemm, const PackedBatch& batch, SequenceRange range,
                                  int chunks, std::vector<float>& x, LlamaLayerBuffers& buffers,
                                  Communicator* comm, const Stream& stream) const;
  // forward()'s argument checks (run_op's callers make them once per call).
  void check_call(const PackedBatch& batch, const std::vector<float>& x,
                  const std::vector<float>& residual, Communicator* comm) const;

 private:
  void attend(const PackedBatch& batch, SequenceRange range, const std::vector<float>& q,
              const PagedKvCache& cache, std::vector<float>& out) const;
  // out = the sum over ranks of `partial` (a copy when there is no group).
  void sum_over_ranks(const TensorView& partial, const TensorView& out, Communicator* comm,
                      const Stream& stream) const;

  LlamaShapes shapes_;
  int64_t layer_idx_ = 0;
  float eps_ = 0;
  LlamaLayerWeights w_;
  const std::vector<float>* inv_freq_ = nullptr;
};

}  // namespace tessera::model
