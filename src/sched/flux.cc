// Flux (schedule.h): sequential's order, with each row-parallel GEMM and the all-reduce of its
// partial sums (o_proj + its all-reduce, down + its all-reduce) run as one fused
// GEMM+ReduceScatter and an all-gather of the reduced rows (tessera/tp/operation.h). One rank
// has nothing to reduce: sequential.
#include "sched/strategies.h"

namespace tessera::sched {

std::vector<NanoBatch> FluxStrategy::split(const model::PackedBatch& batch) const {
  return token_balanced_split(batch, 1);
}

void FluxStrategy::schedule(ScheduleContext& ctx) const {
  for (int n = 0; n < ctx.num_nano_batches(); ++n) {
    while (const std::optional<Step> s = ctx.ready(n)) {
      if (ctx.group_size() > 1 &&
          model::fused_group_starts_at(model::FusedGroup::kRowParallelPair, s->op))
        ctx.run_fused(n, *s, model::FusedGroup::kRowParallelPair);
      else
        ctx.run_next(n, {model::OpKind::kCompute});
    }
  }
}

}  // namespace tessera::sched
