// The strategies of make_strategy() (tessera/sched/schedule.h), one file each.
#pragma once

#include "tessera/sched/schedule.h"

namespace tessera::sched {

// NanoFlow splits batches of at least this many tokens (below, overlap cannot pay; where it
// measured slower above, the rule, sched/rule.h, runs sequential instead).
inline constexpr int64_t kNanoFlowMinTokens = 64;
// The share of the multiprocessors NanoFlow's GEMMs take while the other nano-batch's attention
// runs. All of them: bench sched's nanoflow:P sweep on H100 (docs/PERF.md) found every smaller
// share slower, since the split-KV attention on the rest gains less than the GEMMs lose.
inline constexpr int kNanoFlowGemmSmPercent = 100;

// Single-batch overlap pipelines a row-parallel pair in chunks of at least this many rows (a
// chunk's GEMM reads the whole weight again; fewer rows would not pay for it), at most
// kSingleBatchMaxChunks of them.
inline constexpr int64_t kSingleBatchChunkRows = 1024;
inline constexpr int kSingleBatchMaxChunks = 8;
// The share of the multiprocessors those chunks' GEMMs take. A GEMM on all of them holds every
// one until it ends, so the all-reduce beside it waits; but at TP 2 on H200s a GEMM on 90%, 80%
// or 70% lost more than the all-reduce gained (docs/PERF.md), so by default all.
inline constexpr int kSingleBatchGemmSmPercent = 100;

class SequentialStrategy final : public Strategy {
 public:
  std::string name() const override { return "sequential"; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;
};

class NanoFlowStrategy final : public Strategy {
 public:
  // shared_gemms: how many GEMMs after the other nano-batch's attention run on gemm_sm_percent
  // of the multiprocessors (0: every one until this nano-batch's own attention output is read).
  // positions_per_row: 0, nano-batches of equal tokens (token_balanced_split); else the split
  // whose two overlapped phases a cost model finishes soonest (overlap_balanced_split, with
  // this many cached positions costing one row of GEMMs).
  NanoFlowStrategy(int gemm_sm_percent, int shared_gemms, int64_t positions_per_row = 0)
      : gemm_sm_percent_(gemm_sm_percent),
        shared_gemms_(shared_gemms),
        positions_per_row_(positions_per_row) {}
  std::string name() const override;
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;

 private:
  int gemm_sm_percent_;
  int shared_gemms_;
  int64_t positions_per_row_;
};

class DualBatchStrategy final : public Strategy {
 public:
  std::string name() const override { return "dual_batch"; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;
};

class TokenWeaveStrategy final : public Strategy {
 public:
  std::string name() const override { return "tokenweave"; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;
  std::vector<model::FusedGroup> fused_groups() const override {
    return {model::FusedGroup::kAllReduceNorm};
  }
};

class SingleBatchStrategy final : public Strategy {
 public:
  SingleBatchStrategy(int64_t chunk_rows, int gemm_sm_percent)
      : chunk_rows_(chunk_rows), gemm_sm_percent_(gemm_sm_percent) {}
  std::string name() const override;
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;
  std::vector<model::FusedGroup> fused_groups() const override {
    return {model::FusedGroup::kRowParallelPipelined};
  }
  // The row chunks of a row-parallel pair over `rows` rows: one per chunk_rows, at most
  // kSingleBatchMaxChunks (1: the pair runs unpipelined).
  int chunks_for(int64_t rows) const;

 private:
  int64_t chunk_rows_;
  int gemm_sm_percent_;
};

class FluxStrategy final : public Strategy {
 public:
  std::string name() const override { return "flux"; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;
  std::vector<model::FusedGroup> fused_groups() const override {
    return {model::FusedGroup::kRowParallelPair};
  }
};

// A strategy scheduling only a partition's steps ("NAME@PARTITION"): the inner strategy's split,
// schedule and fused groups.
class PartitionedStrategy final : public Strategy {
 public:
  PartitionedStrategy(std::unique_ptr<Strategy> inner, std::string partition_text)
      : inner_(std::move(inner)),
        text_(std::move(partition_text)),
        partition_(parse_partition(text_)) {}
  std::string name() const override { return inner_->name() + "@" + text_; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override {
    return inner_->split(batch);
  }
  void schedule(ScheduleContext& ctx) const override { inner_->schedule(ctx); }
  std::vector<model::FusedGroup> fused_groups() const override { return inner_->fused_groups(); }
  std::optional<Partition> partition() const override { return partition_; }

 private:
  std::unique_ptr<Strategy> inner_;
  std::string text_;
  Partition partition_;
};

}  // namespace tessera::sched
