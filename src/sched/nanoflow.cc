// NanoFlow (schedule.h) on one GPU's streams: two token-balanced nano-batches, each run up to and
// including its next attention (and, where the collectives span ranks, its next collective),
// then the other's turn; so one nano-batch's decode attention (memory-bound, on the memory
// stream) and collectives (network) run beside the other's GEMMs (compute). The norms go on the
// compute stream: they are short, and on the memory stream they would queue behind the other
// nano-batch's attention and stall their own GEMMs. The GEMMs that run while the other
// nano-batch's attention is in flight (all of them, or the first shared_gemms) take
// gemm_sm_percent of the multiprocessors, and each decode attention the rest: a persistent
// kernel on every SM would hold them all until it ended, whichever of the two came first. Beside
// an attention that reads no cached positions (a nano-batch of new prompts: compute-bound, and
// short) there is no memory traffic to hide, so the GEMMs beside it keep the whole GPU.
#include "sched/strategies.h"
#include "tessera/core/error.h"

namespace tessera::sched {

std::string NanoFlowStrategy::name() const {
  if (positions_per_row_ > 0)
    return str("nanoflow:", gemm_sm_percent_, ":", shared_gemms_, ":", positions_per_row_);
  if (shared_gemms_ > 0) return str("nanoflow:", gemm_sm_percent_, ":", shared_gemms_);
  return gemm_sm_percent_ == kNanoFlowGemmSmPercent ? "nanoflow"
                                                    : str("nanoflow:", gemm_sm_percent_);
}

std::vector<NanoBatch> NanoFlowStrategy::split(const model::PackedBatch& batch) const {
  if (batch.total_tokens() < kNanoFlowMinTokens) return token_balanced_split(batch, 1);
  if (positions_per_row_ > 0)
    return overlap_balanced_split(batch, positions_per_row_, gemm_sm_percent_);
  return token_balanced_split(batch, 2);
}

void NanoFlowStrategy::schedule(ScheduleContext& ctx) const {
  using model::LlamaOp;
  using model::OpKind;
  const bool collectives_wait = ctx.group_size() > 1;
  // The nano-batch whose attention may still be running: from its issue until that
  // nano-batch's next compute operation (which waits for it on the compute stream).
  int attending = -1;
  int shared_left = 0;  // of shared_gemms_, since `attending`'s attention was issued
  int n = 0;
  while (!ctx.finished()) {
    const bool reads_cache = ctx.nano_batch(n).cached_positions > 0;
    while (const std::optional<Step> s = ctx.ready(n)) {
      Placement where;
      OpKind kind = model::llama_op_kind(s->op);
      const bool gemm = kind == OpKind::kCompute;  // the operations with a GEMM
      const bool norm = s->op == LlamaOp::kAttnNorm || s->op == LlamaOp::kMlpNorm;
      if (norm || (kind == OpKind::kNetwork && !collectives_wait)) kind = OpKind::kCompute;
      where.stream = kind;
      if (kind == OpKind::kCompute) {
        if (attending == n) {
          attending = -1;
        } else if (attending >= 0 && gemm && (shared_gemms_ == 0 || shared_left > 0)) {
          where.gemm_sm_percent = gemm_sm_percent_;
          --shared_left;
        }
      }
      if (s->op == LlamaOp::kAttention && gemm_sm_percent_ < 100 && reads_cache)
        where.attention_sm_percent = 100 - gemm_sm_percent_;
      ctx.run_next(n, where);
      if (s->op == LlamaOp::kAttention) {
        attending = reads_cache ? n : -1;
        shared_left = shared_gemms_;
        break;
      }
      if (kind == OpKind::kNetwork) break;
    }
    n = (n + 1) % ctx.num_nano_batches();
  }
}

}  // namespace tessera::sched
