// Single-batch overlap (schedule.h), SGLang's overlap within one batch for a dense
// tensor-parallel model: no nano-batches; each row-parallel GEMM (o_proj, down) runs in row
// chunks, and each chunk's all-reduce starts once its rows are done, beside the next chunk's
// GEMM (optionally on a share of the multiprocessors, so the all-reduce has some to run on). One
// rank, or too few rows for two chunks: sequential.
#include <algorithm>

#include "sched/strategies.h"
#include "tessera/core/error.h"

namespace tessera::sched {

std::string SingleBatchStrategy::name() const {
  if (gemm_sm_percent_ != kSingleBatchGemmSmPercent)
    return str("single_batch:", chunk_rows_, ":", gemm_sm_percent_);
  return chunk_rows_ == kSingleBatchChunkRows ? "single_batch" : str("single_batch:", chunk_rows_);
}

std::vector<NanoBatch> SingleBatchStrategy::split(const model::PackedBatch& batch) const {
  return token_balanced_split(batch, 1);
}

int SingleBatchStrategy::chunks_for(int64_t rows) const {
  return int(std::clamp<int64_t>(rows / chunk_rows_, 1, kSingleBatchMaxChunks));
}

void SingleBatchStrategy::schedule(ScheduleContext& ctx) const {
  constexpr model::FusedGroup kPipelined = model::FusedGroup::kRowParallelPipelined;
  for (int n = 0; n < ctx.num_nano_batches(); ++n) {
    const int chunks = chunks_for(ctx.nano_batch(n).rows);
    while (const std::optional<Step> s = ctx.ready(n)) {
      if (ctx.group_size() > 1 && chunks > 1 && model::fused_group_starts_at(kPipelined, s->op))
        ctx.run_fused(n, *s, kPipelined, {chunks, gemm_sm_percent_});
      else
        ctx.run_next(n, {model::OpKind::kCompute});
    }
  }
}

}  // namespace tessera::sched
