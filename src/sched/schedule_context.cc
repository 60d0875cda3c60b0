// Splitting batches and tracking each nano-batch's chain of operations (schedule.h).
#include <algorithm>
#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/sched/schedule.h"

namespace tessera::sched {

NanoBatch nano_batch_of(const model::PackedBatch& batch, size_t first_seq, size_t num_seqs) {
  TESSERA_CHECK_ARG(first_seq < batch.sequences.size() && num_seqs >= 1 &&
                        num_seqs <= batch.sequences.size() - first_seq,
                    "nano-batch of sequences [", first_seq, ", ", first_seq + num_seqs,
                    "): expected at least one of the batch's ", batch.sequences.size());
  NanoBatch n{first_seq, num_seqs, batch.sequences[first_seq].first_row, 0, 0};
  for (size_t i = first_seq; i < first_seq + num_seqs; ++i) {
    n.rows += batch.sequences[i].num_tokens;
    n.cached_positions += batch.sequences[i].start;
  }
  return n;
}

std::vector<NanoBatch> token_balanced_split(const model::PackedBatch& batch, int parts) {
  TESSERA_CHECK_ARG(parts >= 1, "parts = ", parts, ": expected >= 1");
  // A sequence goes to the part its middle row falls in (parts of T / parts rows each), so parts
  // are contiguous and within a sequence of balanced; empty parts are dropped.
  const int64_t total = batch.total_tokens();
  std::vector<NanoBatch> out;
  size_t first = 0;
  int last_part = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const model::PackedSequence& s = batch.sequences[i];
    const int64_t twice_middle = 2 * s.first_row + s.num_tokens;
    const int part =
        total == 0 ? 0 : int(std::min<int64_t>(parts - 1, twice_middle * parts / (2 * total)));
    if (i > first && part != last_part) {
      out.push_back(nano_batch_of(batch, first, i - first));
      first = i;
    }
    last_part = part;
  }
  if (first < batch.sequences.size())
    out.push_back(nano_batch_of(batch, first, batch.sequences.size() - first));
  return out;
}

std::vector<NanoBatch> overlap_balanced_split(const model::PackedBatch& batch,
                                              int64_t positions_per_row, int gemm_sm_percent) {
  TESSERA_CHECK_ARG(positions_per_row >= 1 && positions_per_row <= kMostPositionsPerRow,
                    "positions_per_row = ", positions_per_row, ": expected 1 to ",
                    kMostPositionsPerRow);
  TESSERA_CHECK_ARG(gemm_sm_percent >= 1 && gemm_sm_percent <= 100,
                    "gemm_sm_percent = ", gemm_sm_percent, ": expected 1 to 100");
  const size_t n = batch.sequences.size();
  if (n < 2) return token_balanced_split(batch, 1);
  const NanoBatch all = nano_batch_of(batch, 0, n);
  // One phase: `attending`'s attention beside the other nano-batch's `rows` of GEMMs, in
  // integer units of 1 / (100 positions_per_row) rows, so equal costs compare equal.
  const int64_t ppr = positions_per_row, share = gemm_sm_percent;
  auto phase = [&](int64_t attending_cached, int64_t rows) {
    if (attending_cached == 0) return rows * share * ppr;
    return std::max(attending_cached * 100, rows * 100 * ppr);
  };
  size_t best = 0;
  int64_t best_cost = 0, best_imbalance = 0, rows = 0, cached = 0;
  for (size_t k = 1; k < n; ++k) {  // the first nano-batch: sequences [0, k)
    rows += batch.sequences[k - 1].num_tokens;
    cached += batch.sequences[k - 1].start;
    const int64_t cost =
        phase(cached, all.rows - rows) + phase(all.cached_positions - cached, rows);
    const int64_t imbalance = std::abs(2 * rows - all.rows);
    if (best == 0 || cost < best_cost || (cost == best_cost && imbalance < best_imbalance)) {
      best = k;
      best_cost = cost;
      best_imbalance = imbalance;
    }
  }
  return {nano_batch_of(batch, 0, best), nano_batch_of(batch, best, n - best)};
}

int nano_batch_index(std::span<const NanoBatch> nanos, const NanoBatch& nano) {
  const auto it = std::find_if(nanos.begin(), nanos.end(),
                               [&](const NanoBatch& m) { return m.first_seq == nano.first_seq; });
  TESSERA_CHECK_ARG(it != nanos.end(), "nano-batch from sequence ", nano.first_seq,
                    ": not one of the ", nanos.size(), " nano-batches");
  return int(it - nanos.begin());
}

ScheduleContext::ScheduleContext(int64_t layers, std::vector<NanoBatch> nanos, Executor execute,
                                 FusedExecutor execute_fused, int group_size,
                                 std::optional<std::vector<model::FusedGroup>> declared,
                                 std::optional<Partition> partition)
    : layers_(layers),
      group_size_(group_size),
      nanos_(std::move(nanos)),
      execute_(std::move(execute)),
      execute_fused_(std::move(execute_fused)),
      declared_(std::move(declared)),
      partition_(std::move(partition)) {
  TESSERA_CHECK_ARG(layers >= 0, "layers = ", layers, ": expected >= 0");
  TESSERA_CHECK_ARG(group_size >= 1, "group_size = ", group_size, ": expected >= 1");
  next_.assign(nanos_.size(), 0);
  for (int n = 0; n < num_nano_batches(); ++n) run_outside_partition(n);
}

void ScheduleContext::run_outside_partition(int n) {
  if (!partition_) return;
  int64_t& i = next_[size_t(n)];
  for (; i < layers_ * model::kLlamaOps; ++i) {
    const Step step{i / model::kLlamaOps, model::LlamaOp(i % model::kLlamaOps)};
    if (partition_->contains(step)) return;
    execute_(nanos_[size_t(n)], step, Placement{model::OpKind::kCompute});
    trace_.push_back({n, step});
  }
}

std::optional<Step> ScheduleContext::ready(int n) const {
  TESSERA_CHECK_ARG(n >= 0 && n < num_nano_batches(), "nano-batch ", n, ": expected 0 to ",
                    num_nano_batches() - 1);
  const int64_t i = next_[size_t(n)];
  if (i >= layers_ * model::kLlamaOps) return std::nullopt;
  return Step{i / model::kLlamaOps, model::LlamaOp(i % model::kLlamaOps)};
}

std::optional<Step> ScheduleContext::after(Step step) const {
  const int64_t i = step.layer * model::kLlamaOps + int64_t(step.op) + 1;
  if (i >= layers_ * model::kLlamaOps) return std::nullopt;
  return Step{i / model::kLlamaOps, model::LlamaOp(i % model::kLlamaOps)};
}

void ScheduleContext::check_ready(int n, Step step) const {
  const std::optional<Step> want = ready(n);
  const auto describe = [](Step s) {
    return str("layer ", s.layer, " ", model::llama_op_name(s.op));
  };
  TESSERA_CHECK_ARG(want.has_value(), "nano-batch ", n, ": ", describe(step),
                    " asked for after its last operation ran");
  if (want->layer != step.layer || want->op != step.op) {
    const int64_t asked = step.layer * model::kLlamaOps + int64_t(step.op);
    const int64_t have = next_[size_t(n)];
    TESSERA_CHECK_ARG(asked > have, "nano-batch ", n, ": ", describe(step), " already ran");
    const int64_t needs = asked - 1;
    throw_error(
        ErrorCode::kInvalidArgument,
        str("nano-batch ", n, ": ", describe(step), " before its input: ",
            describe(Step{needs / model::kLlamaOps, model::LlamaOp(needs % model::kLlamaOps)}),
            " has not run (ready: ", describe(*want), ")"));
  }
}

void ScheduleContext::run(int n, Step step, const Placement& where) {
  check_ready(n, step);
  TESSERA_CHECK_ARG(where.gemm_sm_percent >= 1 && where.gemm_sm_percent <= 100,
                    "gemm_sm_percent = ", where.gemm_sm_percent, ": expected 1 to 100");
  TESSERA_CHECK_ARG(where.attention_sm_percent >= 1 && where.attention_sm_percent <= 100,
                    "attention_sm_percent = ", where.attention_sm_percent, ": expected 1 to 100");
  execute_(nanos_[size_t(n)], step, where);
  ++next_[size_t(n)];
  trace_.push_back({n, step});
  run_outside_partition(n);
}

void ScheduleContext::run_fused(int n, Step first, model::FusedGroup group,
                                const FusedOptions& how) {
  check_ready(n, first);
  const auto group_from = [&] {
    return str("nano-batch ", n, ": a ", model::fused_group_name(group), " group from layer ",
               first.layer, " ", model::llama_op_name(first.op));
  };
  TESSERA_CHECK_ARG(next_[size_t(n)] + model::kFusedGroupSteps <= layers_ * model::kLlamaOps,
                    group_from(), ": past the end of its chain");
  TESSERA_CHECK_ARG(model::fused_group_starts_at(group, first.op), group_from(),
                    ": no such group starts there");
  TESSERA_CHECK_ARG(!partition_ || partition_->contains(*after(first)), group_from(),
                    ": its second step is outside the strategy's partition");
  TESSERA_CHECK_ARG(
      !declared_ || std::find(declared_->begin(), declared_->end(), group) != declared_->end(),
      group_from(), ": the strategy did not declare that kind (Strategy::fused_groups)");
  const int most_chunks = group == model::FusedGroup::kRowParallelPipelined ? 64 : 1;
  TESSERA_CHECK_ARG(how.chunks >= 1 && how.chunks <= most_chunks, group_from(),
                    ": chunks = ", how.chunks, ": expected 1 to ", most_chunks);
  TESSERA_CHECK_ARG(how.gemm_sm_percent >= 1 && how.gemm_sm_percent <= 100, group_from(),
                    ": gemm_sm_percent = ", how.gemm_sm_percent, ": expected 1 to 100");
  TESSERA_CHECK_ARG(bool(execute_fused_), group_from(),
                    ": a fused operation asked for, but the model gave no fused executor");
  execute_fused_(nanos_[size_t(n)], first, group, how);
  Step step = first;
  for (int i = 0; i < model::kFusedGroupSteps; ++i) {
    trace_.push_back({n, step});
    ++next_[size_t(n)];
    if (i + 1 < model::kFusedGroupSteps) step = *after(step);
  }
  run_outside_partition(n);
}

void ScheduleContext::run_next(int n, const Placement& where) {
  const std::optional<Step> step = ready(n);
  TESSERA_CHECK_ARG(step.has_value(), "nano-batch ", n, ": nothing left to run");
  run(n, *step, where);
}

bool ScheduleContext::finished() const {
  for (int n = 0; n < num_nano_batches(); ++n) {
    if (ready(n)) return false;
  }
  return true;
}

}  // namespace tessera::sched
