// NanoFlow (schedule.h): two token-balanced nano-batches when the batch is large enough; the
// next operation comes from the other nano-batch when its ready operation is of another kind
// than the one that ran last (a GEMM beside the other nano-batch's attention or all-reduce).
#include "sched/strategies.h"

namespace tessera::sched {

std::vector<NanoBatch> NanoFlowStrategy::split(const model::PackedBatch& batch) const {
  return token_balanced_split(batch, batch.total_tokens() >= kNanoFlowMinTokens ? 2 : 1);
}

void NanoFlowStrategy::schedule(ScheduleContext& ctx) const {
  const int count = ctx.num_nano_batches();
  std::optional<model::OpKind> last_kind;
  int last = count - 1;
  while (!ctx.finished()) {
    // The next nano-batch after the last one run whose ready operation is of another kind
    // (it overlaps what is in flight), else the next one with anything ready.
    int pick = -1, fallback = -1;
    for (int i = 1; i <= count && pick < 0; ++i) {
      const int n = (last + i) % count;
      const std::optional<Step> s = ctx.ready(n);
      if (!s) continue;
      if (fallback < 0) fallback = n;
      if (!last_kind || model::llama_op_kind(s->op) != *last_kind) pick = n;
    }
    if (pick < 0) pick = fallback;
    last_kind = model::llama_op_kind(ctx.ready(pick)->op);
    last = pick;
    ctx.run_next(pick);
  }
}

}  // namespace tessera::sched
