// The sequential strategy (schedule.h): one nano-batch, its operations in order on the compute
// stream (no hops between streams: the unscheduled step's launches).
#include "sched/strategies.h"

namespace tessera::sched {

std::vector<NanoBatch> SequentialStrategy::split(const model::PackedBatch& batch) const {
  return token_balanced_split(batch, 1);
}

void SequentialStrategy::schedule(ScheduleContext& ctx) const {
  for (int n = 0; n < ctx.num_nano_batches(); ++n) {
    while (ctx.ready(n)) ctx.run_next(n, {model::OpKind::kCompute});
  }
}

}  // namespace tessera::sched
