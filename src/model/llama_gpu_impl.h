// Internal: LlamaGpuModel's implementation, shared by llama_gpu_model.cc (construction, steps,
// graphs), llama_gpu_ops.cc (a layer's logical operations over a part of a step) and
// llama_gpu_schedule.cc (the operations ordered by a scheduler strategy on several streams).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/llama_gpu_backend.h"
#include "tessera/core/buffer.h"
#include "tessera/decode/attention_block.h"
#include "tessera/gemm/gemm.h"
#include "tessera/model/llama_gpu_model.h"
#include "tessera/model/llama_layer.h"
#include "tessera/model/packed_batch.h"
#include "tessera/model/page_allocator.h"
#include "tessera/sched/timeline.h"

namespace tessera::sched {
class Strategy;
}

namespace tessera::model {

enum class LinearKind : int { kQkv, kO, kGateUp, kDown, kHead };

struct LayerWeights {
  Tensor input_norm, wqkv, bqkv, wo, post_norm, wgu, wdown;
};

// One decoder layer's work over the rows of a step: prefills run attention by varlen launches
// (one per run of prefills in adjacent rows), decodes in runs of consecutive inputs (one row
// each) through the split-KV kernel.
struct Prefill {
  int64_t first_row = 0, num_tokens = 0;
  // Tokens of the sequence cached before these (a chunked prefill when > 0). A prompt (0 cached)
  // joins a run of prompts in adjacent rows: the run's first row, and the step_i32 offset of
  // this prompt's entry in the run's cu_seqlens (rows counted from the run's first). A chunk
  // attends over its sequence's cache rows, whose slots for positions [0, cached + num_tokens)
  // start at step_i32 offset gather_offset.
  int64_t cached = 0;
  int64_t run_first_row = 0, cu_offset = 0, gather_offset = 0;
};
struct DecodeRun {
  int64_t first_input = 0, count = 0, first_row = 0;
};
struct Step {
  int64_t tokens = 0, logit_rows = 0;
  int64_t cu_entries = 0;      // cu_seqlens entries of every prefill run, at off_cu
  int64_t gather_entries = 0;  // cache slots the chunked prefills gather, at off_gather
  std::vector<Prefill> prefills;
  std::vector<DecodeRun> decodes;
  PackedBatch batch;  // the inputs as sequences of rows (what a strategy splits)
};

// Rows [first_row, first_row + tokens) of a step, whole sequences: the step itself, or one
// nano-batch of it. Row and input indices in prefills and decodes are the step's.
struct Part {
  int64_t first_row = 0, tokens = 0;
  std::vector<Prefill> prefills;
  std::vector<DecodeRun> decodes;
};
Part whole(const Step& step);
// The part of `step` holding its inputs [first_input, first_input + count) (rows contiguous).
Part part_of(const Step& step, int64_t first_input, int64_t count);

using Bits = std::vector<uint16_t>;  // bf16 or f16 values, as the device holds them

struct LlamaGpuModel::Impl {
  Impl(const DecoderConfig& config, const LlamaTensorSource& source, const LlamaGpuOptions& o,
       Communicator* comm);

  Tensor upload(const Bits& bits, std::initializer_list<int64_t> shape, bool count = true);
  const gemm::Gemm& linear(LinearKind kind, int64_t m);
  void run_linear(LinearKind kind, const TensorView& a, const Tensor& w, const Tensor& bias,
                  const TensorView& out);
  // Rows [0, n) of a [rows, width] buffer.
  TensorView rows(const Tensor& t, int64_t n) const { return t.view().slice(0, 0, n); }
  // Rows of `part` of a [rows, width] buffer.
  TensorView rows(const Tensor& t, const Part& part) const {
    return t.view().slice(0, part.first_row, part.tokens);
  }
  const int32_t* i32(int64_t offset) const { return step_i32.data_as<int32_t>() + offset; }
  TensorView i32_view(int64_t offset, int64_t n) const {
    return TensorView(const_cast<int32_t*>(i32(offset)), DType::kI32, device, {n});
  }
  int splits_for(int64_t batch) const;

  Step pack(std::span<const SequenceTokens> inputs, LogitRows which);
  void upload_step(const Step& step, size_t inputs);
  // The layers of a step from the embedding's x to the lm_head's logits: in order on `stream`,
  // or ordered by `strategy` over its nano-batches (llama_gpu_schedule.cc).
  void run_step(const Step& step, const sched::Strategy* strategy);
  void run_layer(int64_t layer, const Step& step, const Part& all);  // all = whole(step)
  // One logical operation of layer `layer` over the rows of `part`, on `on`, its GEMMs or its
  // decode attention on at most sm_limit multiprocessors (0: all) (llama_gpu_ops.cc); run_layer
  // is the nine in order over the whole step.
  void run_op(int64_t layer, LlamaOp op, const Part& part, const Stream& on, int sm_limit = 0);
  void attend(int64_t layer, const Part& part, const Stream& on, int sm_limit);
  // A strategy's fused group: the all-reduce before layer `layer`'s `norm` (kAttnNorm: the
  // previous layer's MLP all-reduce; kMlpNorm: this layer's attention all-reduce) and the norm.
  void run_all_reduce_norm(int64_t layer, LlamaOp norm, const Part& part, const Stream& on);
  void run_scheduled_layers(const Step& step, const sched::Strategy& strategy);
  // After wait(): the last scheduled step's timed spans into `timeline` (when set).
  void collect_timeline();
  // Layer `layer`'s keys and values: [num_pages * page_size, kv_width] rows.
  TensorView k_table(int64_t layer) const;
  TensorView v_table(int64_t layer) const;
  // The fused decode attention block for a decode-only step of `batch` sequences (the
  // ClusterFusion kernel: projections, RoPE, cache append, attention, output projection), or
  // null where it does not take the model (then the layer's own operations run).
  const decode::AttentionBlock* fused_block(int64_t batch);
  // Runs the step eagerly or from its CUDA graph (decode-only batches), ordered by `strategy`
  // when given (its own graphs).
  void execute(const Step& step, size_t inputs, const sched::Strategy* strategy);
  // Waits for the stream; with a group, first for the collectives through the Communicator (its
  // timeout names the rank that did not arrive), so no cross-GPU wait is unbounded.
  void wait() const {
    if (comm != nullptr) comm->synchronize(stream);
    stream.synchronize();
  }

  DecoderConfig config;
  LlamaShapes shapes;
  LlamaGpuOptions opts;
  Communicator* comm = nullptr;
  Device device;
  Stream stream = Stream::cpu();
  int64_t weight_bytes = 0;
  int64_t qkv_width = 0, pages_per_seq = 0, cache_rows = 0;

  Tensor embed, final_norm, lm_head, inv_freq;
  std::vector<LayerWeights> layers;
  Tensor cache;  // [layers, 2, cache_rows, kv_width]
  PageAllocator pages;

  Tensor x, residual, h, qkv, attn, gate_up, act, partial;  // [max_tokens, width]
  Tensor xr, rr, hr, logits, next;                          // [max_logit_rows, ...]
  Tensor partial_o, partial_lse;                            // split-KV workspace
  Tensor gathered_k, gathered_v;  // [max_context, kv_width]: a chunked prefill's cached rows
  // Step inputs, i32: ids, positions, slots [max_tokens]; logit rows [max_logit_rows];
  // seq_pos [max_batch]; page table [max_batch, pages_per_seq]; the prefill runs' cu_seqlens
  // [2 max_batch] (a run of n prefills takes n + 1 entries); the chunked prefills' cache slots
  // [max_batch * max_context].
  Tensor step_i32;
  std::vector<int32_t> staging;
  int64_t off_pos = 0, off_slot = 0, off_rows = 0, off_seq = 0, off_table = 0, off_cu = 0,
          off_gather = 0;

  std::map<std::pair<int, int64_t>, std::unique_ptr<gemm::Gemm>> gemms;
#ifdef TESSERA_WITH_CUDA
  // By (decode batch size, strategy name; "" for none).
  std::map<std::pair<int64_t, std::string>, std::unique_ptr<detail::CudaGraph>> graphs;
#endif
  std::set<std::pair<int64_t, std::string>> eager_batches;  // run once eagerly (plans made)
  // A strategy's streams, forked from `stream` and joined to it around the layers: compute,
  // memory-bound and network operations; made at the first scheduled step.
  std::optional<Stream> compute_stream, memory_stream, network_stream;
  std::optional<Event> hop;      // forks and joins those streams; orders a pipelined pair's chunks
  std::vector<Event> nano_done;  // per (nano-batch, stream): sched/stream_order.h's events
  double last_host_us = 0;       // the host time of the last execute()
  // set_timeline: while set, scheduled steps run eagerly with timing events around each
  // operation, read into the timeline once the step is done (collect_timeline).
  sched::Timeline* timeline = nullptr;
  struct TimedSpan {
    sched::TimelineSpan span;
    Event start, end;
  };
  std::optional<Event> timeline_origin;  // on `stream`, before the fork
  std::vector<TimedSpan> timed_spans;
  struct FusedDecode {
    std::unique_ptr<decode::AttentionBlock> block;  // null: the kernel does not take it
    Tensor workspace;
  };
  std::map<int64_t, FusedDecode> fused;  // by batch size
  int sm_count = 1;
  int64_t split_kv_wave = 1;  // CTAs of the split-KV kernel resident at once (split_kv_rule.h)
};

}  // namespace tessera::model
