#include "tessera/model/llama_model.h"

#include <chrono>
#include <set>

#include "linear.h"
#include "model/greedy.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"
#include "tessera/sched/schedule.h"
#include "tessera/sched/timeline.h"

namespace tessera::model {
namespace {

PagedKvCacheConfig cache_config(const LlamaShapes& s, const KvCacheSize& size) {
  return {s.num_layers, s.kv_heads, s.head_dim, size.page_size, size.num_pages};
}

}  // namespace

LlamaModel::LlamaModel(const DecoderConfig& config, LlamaWeights weights,
                       const KvCacheSize& cache_size, Communicator* comm)
    : config_(config),
      shapes_(weights.shapes),
      embed_(std::move(weights.embed)),
      final_norm_(std::move(weights.final_norm)),
      lm_head_(std::move(weights.lm_head)),
      inv_freq_(rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)),
      cache_(cache_config(weights.shapes, cache_size)),
      comm_(comm) {
  const LlamaShapes expected = llama_shapes(config, shapes_.rank, shapes_.ranks);
  TESSERA_CHECK_ARG(expected.q_heads == shapes_.q_heads && expected.kv_heads == shapes_.kv_heads &&
                        expected.intermediate == shapes_.intermediate &&
                        expected.hidden == shapes_.hidden && expected.vocab == shapes_.vocab &&
                        int64_t(weights.layers.size()) == expected.num_layers,
                    "LlamaModel: weights: made for another configuration than `config`");
  const int64_t c = shapes_.hidden, v = shapes_.vocab;
  TESSERA_CHECK_ARG(int64_t(embed_.size()) == v * c && int64_t(lm_head_.size()) == v * c &&
                        int64_t(final_norm_.size()) == c,
                    "LlamaModel: weights: embed_tokens and lm_head expected ", v, " x ", c,
                    ", norm ", c, " elements");
  TESSERA_CHECK_ARG(
      (comm == nullptr && shapes_.ranks == 1) ||
          (comm != nullptr && comm->size() == shapes_.ranks && comm->rank() == shapes_.rank),
      "LlamaModel: comm: expected the group of rank ", shapes_.rank, " of ", shapes_.ranks,
      " (null for one rank)");
  layers_.reserve(weights.layers.size());
  for (size_t i = 0; i < weights.layers.size(); ++i)
    layers_.emplace_back(config, shapes_, int64_t(i), std::move(weights.layers[i]), &inv_freq_);
}

PackedBatch LlamaModel::pack(std::span<const SequenceTokens> inputs) const {
  PackedBatch batch;
  std::set<int64_t> seen;
  int64_t pages_needed = 0;
  const int64_t page = cache_.config().page_size;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SequenceTokens& in = inputs[i];
    TESSERA_CHECK_ARG(cache_.contains(in.seq_id), "LlamaModel::forward: inputs[", i,
                      "].seq_id = ", in.seq_id, ": no such sequence (add_sequence() first)");
    TESSERA_CHECK_ARG(seen.insert(in.seq_id).second, "LlamaModel::forward: inputs[", i,
                      "].seq_id = ", in.seq_id, ": repeated in one batch");
    for (size_t j = 0; j < in.tokens.size(); ++j) {
      TESSERA_CHECK_ARG(in.tokens[j] >= 0 && in.tokens[j] < shapes_.vocab,
                        "LlamaModel::forward: inputs[", i, "].tokens[", j, "] = ", in.tokens[j],
                        ": expected in [0, ", shapes_.vocab, ")");
    }
    const int64_t start = cache_.length(in.seq_id), n = int64_t(in.tokens.size());
    const int64_t have = int64_t(cache_.page_table(in.seq_id).size());
    pages_needed += std::max<int64_t>(0, (start + n + page - 1) / page - have);
    batch.sequences.push_back({in.seq_id, start, n, batch.total_tokens()});
    for (int64_t p = start; p < start + n; ++p) batch.positions.push_back(int32_t(p));
  }
  // Checked for the whole batch first, so a batch that does not fit caches nothing.
  TESSERA_CHECK_ARG(pages_needed <= cache_.free_pages(),
                    "LlamaModel::forward: out of KV cache "
                    "pages: the batch needs ",
                    pages_needed, " more, ", cache_.free_pages(), " of ", cache_.config().num_pages,
                    " are free");
  return batch;
}

template <typename RunLayers>
std::vector<float> LlamaModel::forward_with(std::span<const SequenceTokens> inputs,
                                            RunLayers&& run_layers) {
  const PackedBatch batch = pack(inputs);
  for (const PackedSequence& s : batch.sequences) cache_.extend(s.seq_id, s.num_tokens);
  try {
    return run_extended(batch, inputs, run_layers);
  } catch (...) {
    // A step that fails (a strategy's error, a peer's failure) caches nothing: the sequences
    // go back to their lengths before it, so the next step does not read what this one left.
    for (const PackedSequence& s : batch.sequences) cache_.truncate(s.seq_id, s.start);
    throw;
  }
}

template <typename RunLayers>
std::vector<float> LlamaModel::run_extended(const PackedBatch& batch,
                                            std::span<const SequenceTokens> inputs,
                                            RunLayers&& run_layers) {
  const int64_t t = batch.total_tokens(), c = shapes_.hidden, v = shapes_.vocab;
  const Device cpu = Device::cpu();
  std::vector<int32_t> ids;
  ids.reserve(size_t(t));
  for (const SequenceTokens& in : inputs) ids.insert(ids.end(), in.tokens.begin(), in.tokens.end());
  std::vector<float> x(size_t(t * c)), residual(size_t(t * c), 0.0f);
  if (t == 0) return {};
  embedding(TensorView(ids.data(), DType::kI32, cpu, {t}),
            TensorView(embed_.data(), DType::kF32, cpu, {v, c}),
            TensorView(x.data(), DType::kF32, cpu, {t, c}), stream_);
  run_layers(batch, x, residual);
  std::vector<float> h(size_t(t * c)), logits(size_t(t * v));
  const TensorView res(residual.data(), DType::kF32, cpu, {t, c});
  rms_norm(TensorView(x.data(), DType::kF32, cpu, {t, c}), {res, res},
           TensorView(final_norm_.data(), DType::kF32, cpu, {c}), float(config_.rms_norm_eps),
           TensorView(h.data(), DType::kF32, cpu, {t, c}), stream_);
  linear(h.data(), t, c, lm_head_, {}, logits.data(), v, stream_);
  return logits;
}

LlamaModel::LlamaModel(const DecoderConfig& config, LlamaWeights weights,
                       const KvCacheSize& cache_size, RankContext& ctx)
    : LlamaModel(config, std::move(weights), cache_size, ctx.size > 1 ? ctx.world.get() : nullptr) {
  ctx_ = &ctx;
}

tp::TpOperation& LlamaModel::row_parallel_op(LlamaOp gemm, int64_t rows) {
  TESSERA_CHECK(ctx_ != nullptr && ctx_->heap != nullptr && comm_ != nullptr,
                ErrorCode::kUnsupported, "LlamaModel: ", llama_op_name(gemm),
                " and its all-reduce as a fused GEMM+ReduceScatter (strategy flux): expected a "
                "model made with a RankContext of several ranks that has a symmetric heap");
  std::unique_ptr<tp::TpOperation>& op = row_parallel_ops_[{gemm, rows}];
  if (!op) {
    tp::TpRequest r;
    r.op = tp::TpOp::kGemmReduceScatter;
    r.m = rows;
    r.n = shapes_.hidden;
    r.k = (gemm == LlamaOp::kOProj ? shapes_.q_width() : shapes_.intermediate) * comm_->size();
    r.dtype = r.out_dtype = DType::kF32;
    r.weight_layout = tp::WeightLayout::kNK;
    tp::TpPlanOptions fused;
    fused.fuse = tp::TpPlanOptions::Fuse::kFused;
    op = std::make_unique<tp::TpOperation>(*ctx_, tp::plan_for_context(*ctx_, r, fused));
  }
  return *op;
}

std::vector<float> last_token_logits(std::span<const float> logits,
                                     std::span<const SequenceTokens> inputs, int64_t vocab) {
  std::vector<float> last;
  int64_t row = 0;
  for (const SequenceTokens& in : inputs) {
    row += int64_t(in.tokens.size());
    last.insert(last.end(), logits.begin() + (row - 1) * vocab, logits.begin() + row * vocab);
  }
  return last;
}

std::vector<float> LlamaModel::forward(std::span<const SequenceTokens> inputs) {
  return forward_with(inputs, [&](const PackedBatch& batch, std::vector<float>& x,
                                  std::vector<float>& residual) {
    for (const LlamaLayer& layer : layers_) layer.forward(batch, x, residual, cache_, comm_, stream_);
  });
}

std::vector<float> LlamaModel::forward(std::span<const SequenceTokens> inputs,
                                       const sched::Strategy& strategy) {
  return forward_with(inputs, [&](const PackedBatch& batch, std::vector<float>& x,
                                  std::vector<float>& residual) {
    // One set of activations per layer call, shared by the nano-batches (row ranges of it).
    LlamaLayerBuffers buffers;
    buffers.resize(shapes_, batch.total_tokens());
    for (const LlamaLayer& layer : layers_) layer.check_call(batch, x, residual, comm_);
    auto range = [](const sched::NanoBatch& nano) {
      return SequenceRange{nano.first_seq, nano.first_seq + nano.num_seqs};
    };
    // The fused groups: a row-parallel GEMM and its all-reduce as GEMM+ReduceScatter (flux) or
    // in row chunks (single_batch), an all-reduce and the RMSNorm that reads it (tokenweave).
    auto run_fused_group = [&](const sched::NanoBatch& nano, sched::Step first, FusedGroup group,
                               const sched::FusedOptions& how) {
      const LlamaLayer& layer = layers_[size_t(first.layer)];
      switch (group) {
        case FusedGroup::kRowParallelPair:
          return layer.run_row_parallel_fused(first.op, batch, range(nano), x, buffers,
                                              row_parallel_op(first.op, nano.rows), *comm_,
                                              stream_);
        case FusedGroup::kRowParallelPipelined:
          return layer.run_row_parallel_pipelined(first.op, batch, range(nano), how.chunks, x,
                                                  buffers, comm_, stream_);
        case FusedGroup::kAllReduceNorm: {
          const AllReduceNorm g =
              all_reduce_norm_group(first.layer, first.op, int64_t(layers_.size()));
          return layers_[size_t(g.layer)].run_all_reduce_norm(g.norm, batch, range(nano), x,
                                                              residual, buffers, comm_, stream_);
        }
      }
    };
    const std::vector<sched::NanoBatch> nanos = strategy.split(batch);
    if (timeline_) timeline_->spans.clear();
    const auto step_start = std::chrono::steady_clock::now();
    // Times `run` into the timeline as nano's span of `count` steps from `step` on `stream`.
    auto traced = [&](const sched::NanoBatch& nano, sched::Step step, int count, OpKind stream,
                      auto&& run) {
      if (!timeline_) return run();
      const auto us = [&] {
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                         step_start)
            .count();
      };
      sched::TimelineSpan span{sched::nano_batch_index(nanos, nano), step, count, stream, us(), 0};
      run();
      span.end_us = us();
      timeline_->spans.push_back(span);
    };
    sched::ScheduleContext ctx(
        int64_t(layers_.size()), nanos,
        [&](const sched::NanoBatch& nano, sched::Step step, const sched::Placement& where) {
          traced(nano, step, 1, where.stream.value_or(llama_op_kind(step.op)), [&] {
            layers_[size_t(step.layer)].run_op(step.op, batch, range(nano), x, residual, buffers,
                                               cache_, comm_, stream_);
          });
        },
        [&](const sched::NanoBatch& nano, sched::Step first, FusedGroup group,
            const sched::FusedOptions& how) {
          traced(nano, first, kFusedGroupSteps,
                 group == FusedGroup::kAllReduceNorm ? OpKind::kNetwork : OpKind::kCompute,
                 [&] { run_fused_group(nano, first, group, how); });
        },
        comm_ == nullptr ? 1 : comm_->size(), strategy.fused_groups(), strategy.partition());
    strategy.schedule(ctx);
    TESSERA_CHECK(ctx.finished(), ErrorCode::kInternal, "strategy ", strategy.name(),
                  " returned before running every operation");
  });
}

std::vector<int32_t> LlamaModel::generate_greedy(const std::vector<int32_t>& prompt,
                                                 int64_t steps) {
  return detail::generate_greedy(
      *this, prompt, steps, "LlamaModel::generate_greedy",
      [&](std::span<const SequenceTokens> input) {
        const std::vector<float> logits = forward(input);
        const int64_t rows = int64_t(input[0].tokens.size());
        const Device cpu = Device::cpu();
        int32_t next = 0;
        argmax(TensorView(const_cast<float*>(logits.data()) + (rows - 1) * shapes_.vocab,
                          DType::kF32, cpu, {1, shapes_.vocab}),
               TensorView(&next, DType::kI32, cpu, {1}), stream_);
        return next;
      });
}

}  // namespace tessera::model
