// The strategies of make_strategy() (tessera/sched/schedule.h), one file each.
#pragma once

#include "tessera/sched/schedule.h"

namespace tessera::sched {

// NanoFlow splits batches of at least this many tokens (below, overlap cannot pay).
inline constexpr int64_t kNanoFlowMinTokens = 64;

class SequentialStrategy final : public Strategy {
 public:
  std::string name() const override { return "sequential"; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;
};

class NanoFlowStrategy final : public Strategy {
 public:
  std::string name() const override { return "nanoflow"; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(ScheduleContext& ctx) const override;
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
};

}  // namespace tessera::sched
