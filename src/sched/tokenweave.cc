// TokenWeave (schedule.h): dual-batch overlap's order, with each all-reduce fused with the
// RMSNorm that reads it (reduce-scatter, the norm on this rank's rows, all-gather: on GPUs one
// kernel on a few CTAs, so the other nano-batch keeps the rest of the SMs).
#include "sched/strategies.h"

namespace tessera::sched {

std::vector<NanoBatch> TokenWeaveStrategy::split(const model::PackedBatch& batch) const {
  return token_balanced_split(batch, 2);
}

void TokenWeaveStrategy::schedule(ScheduleContext& ctx) const {
  int n = 0;
  while (!ctx.finished()) {
    while (const std::optional<Step> s = ctx.ready(n)) {
      if (model::llama_op_kind(s->op) != model::OpKind::kNetwork) {
        ctx.run_next(n);
        continue;
      }
      // The last layer's all-reduce has no norm after it in the chain: it runs alone.
      const std::optional<Step> next = ctx.after(*s);
      const bool norm_next = next && (next->op == model::LlamaOp::kMlpNorm ||
                                      next->op == model::LlamaOp::kAttnNorm);
      if (norm_next)
        ctx.run_fused(n, *s, model::FusedGroup::kAllReduceNorm);
      else
        ctx.run_next(n);
      break;
    }
    n = (n + 1) % ctx.num_nano_batches();
  }
}

}  // namespace tessera::sched
