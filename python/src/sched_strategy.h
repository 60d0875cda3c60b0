// A scheduling strategy written in Python (sched.cc): the sched::Strategy the model runtime
// calls, forwarding split() and schedule() to the Python object with the GIL held (the forward
// that calls them runs without it).
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/sched/rule.h"
#include "tessera/sched/schedule.h"

namespace tessera::python {

class PythonStrategy final : public sched::Strategy {
 public:
  // Throws kInvalidArgument unless `strategy` has split() and schedule().
  explicit PythonStrategy(nanobind::object strategy);
  ~PythonStrategy() override;
  std::string name() const override;
  std::vector<sched::NanoBatch> split(const model::PackedBatch& batch) const override;
  void schedule(sched::ScheduleContext& ctx) const override;
  // The object's optional `fused_groups` names ("all_reduce_norm", "row_parallel_pair",
  // "row_parallel_pipelined").
  std::vector<model::FusedGroup> fused_groups() const override;

 private:
  nanobind::object strategy_;
};

// A built-in strategy's name, "auto" (the rule, for a model run as `key` says:
// sched::make_named_strategy), or a Python strategy object.
std::unique_ptr<sched::Strategy> strategy_argument(const nanobind::handle& strategy,
                                                   const sched::RuleKey& key);

}  // namespace tessera::python
