// Dual-batch overlap (schedule.h), as vLLM and SGLang run it: two nano-batches; each runs up to
// and including its next collective, then the other takes over, so one's all-reduce meets the
// other's compute.
#include "sched/strategies.h"

namespace tessera::sched {

std::vector<NanoBatch> DualBatchStrategy::split(const model::PackedBatch& batch) const {
  return token_balanced_split(batch, 2);
}

void DualBatchStrategy::schedule(ScheduleContext& ctx) const {
  int n = 0;
  while (!ctx.finished()) {
    while (const std::optional<Step> s = ctx.ready(n)) {
      ctx.run_next(n);
      if (model::llama_op_kind(s->op) == model::OpKind::kNetwork) break;
    }
    n = (n + 1) % ctx.num_nano_batches();
  }
}

}  // namespace tessera::sched
