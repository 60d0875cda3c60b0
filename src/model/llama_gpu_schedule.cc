// The layers of a step ordered by a scheduler strategy on the cuda backend (DynaFlow's
// backend): the strategy's nano-batches are parts of the step's buffers (views, no copies),
// each operation runs on the stream its strategy places it on (by default its kind's: compute,
// memory-bound or network), its GEMMs on the share of the multiprocessors the placement gives,
// a nano-batch's operation that follows one on another stream waits for it through an event,
// and the three streams fork from the model's stream before the layers and join it after them:
// no host synchronization inside the step, and the whole of it can be captured in one CUDA
// graph.
#include <algorithm>
#include <array>

#include "model/llama_gpu_impl.h"
#include "sched/stream_order.h"
#include "tessera/core/error.h"
#include "tessera/sched/schedule.h"

namespace tessera::model {

void LlamaGpuModel::Impl::run_scheduled_layers(const Step& step, const sched::Strategy& strategy) {
  if (!compute_stream) {
    // Priorities: when a kernel's CTAs retire, a waiting GEMM's take their multiprocessors before
    // a memory-bound kernel's pending ones (so a GEMM limited to a share of them gets its share),
    // and the collectives' few CTAs before both.
    compute_stream = Stream::create_cuda(device.index, -1);
    memory_stream = Stream::create_cuda(device.index, 0);
    network_stream = Stream::create_cuda(device.index, -2);
    hop = Event::create(stream);
  }
  const std::vector<sched::NanoBatch> nanos = strategy.split(step.batch);
  std::vector<Part> parts;
  for (const sched::NanoBatch& n : nanos) {
    parts.push_back(part_of(step, int64_t(n.first_seq), int64_t(n.num_seqs)));
  }
  auto stream_for = [&](LlamaOp op, const sched::Placement& where) -> const Stream& {
    switch (where.stream.value_or(llama_op_kind(op))) {
      case OpKind::kCompute:
        return *compute_stream;
      case OpKind::kMemory:
        return *memory_stream;
      case OpKind::kNetwork:
        return *network_stream;
    }
    return *compute_stream;
  };
  // The multiprocessors of a share of them (0: all).
  auto sms_of = [&](int percent) {
    return percent >= 100 ? 0 : std::max(1, sm_count * percent / 100);
  };
  const std::array<const Stream*, 3> sides = {&*compute_stream, &*memory_stream, &*network_stream};
  // set_timeline: an origin before the fork and timing events around each operation.
  const bool timing = timeline != nullptr;
  if (timing) {
    timed_spans.clear();
    timeline_origin = Event::create(stream, true);
    timeline_origin->record(stream);
  }
  auto traced = [&](size_t n, sched::Step first, int count, OpKind kind, const Stream& on,
                    auto&& run) {
    if (!timing) return run();
    TimedSpan t{
        {int(n), first, count, kind, 0, 0}, Event::create(on, true), Event::create(on, true)};
    t.start.record(on);
    run();
    t.end.record(on);
    timed_spans.push_back(std::move(t));
  };
  // Fork: the strategy's streams start after the embedding (and the previous step's head).
  hop->record(stream);
  for (const Stream* side : sides) hop->wait_on(*side);
  // Cross-stream order per nano-batch (sched/stream_order.h): event (n, side) marks nano-batch
  // n's work on a side.
  const size_t events = sides.size() * parts.size();
  while (nano_done.size() < events) nano_done.push_back(Event::create(stream));
  auto side_of = [&](const Stream& on) {
    return size_t(std::find(sides.begin(), sides.end(), &on) - sides.begin());
  };
  sched::StreamOrder order(parts.size(), sides.size());
  auto issue = [&](const std::vector<sched::StreamOrder::Action>& actions) {
    for (const sched::StreamOrder::Action& a : actions) {
      Event& done = nano_done[a.nano * sides.size() + a.side];
      if (a.record)
        done.record(*sides[a.side]);
      else
        done.wait_on(*sides[a.on]);
    }
  };
  // Nano-batch n's operation runs on `on`: after its previous one, wherever that ran.
  auto enter = [&](const sched::NanoBatch& nano, const Stream& on) {
    const size_t n = size_t(sched::nano_batch_index(nanos, nano));
    issue(order.enter(n, side_of(on)));
    return n;
  };
  sched::ScheduleContext ctx(
      shapes.num_layers, nanos,
      [&](const sched::NanoBatch& nano, sched::Step op, const sched::Placement& where) {
        const Stream& on = stream_for(op.op, where);
        const size_t n = enter(nano, on);
        traced(n, op, 1, where.stream.value_or(llama_op_kind(op.op)), on, [&] {
          const int share =
              op.op == LlamaOp::kAttention ? where.attention_sm_percent : where.gemm_sm_percent;
          run_op(op.layer, op.op, parts[n], on, sms_of(share));
        });
      },
      // The fused groups the GPU model builds (execute() refused the others before the step).
      [&](const sched::NanoBatch& nano, sched::Step first, FusedGroup group,
          const sched::FusedOptions& how) {
        if (group == FusedGroup::kAllReduceNorm) {  // on the network stream
          const AllReduceNorm g = all_reduce_norm_group(first.layer, first.op, shapes.num_layers);
          const size_t n = enter(nano, *network_stream);
          return traced(n, first, kFusedGroupSteps, OpKind::kNetwork, *network_stream,
                        [&] { run_all_reduce_norm(g.layer, g.norm, parts[n], *network_stream); });
        }
        // kRowParallelPipelined: each chunk's GEMM on the compute stream, its all-reduce on the
        // network stream once the chunk's rows are written, beside the next chunk's GEMM; the
        // nano-batch's next operation waits for the last all-reduce.
        const sched::Step reduce{first.layer, LlamaOp(int(first.op) + 1)};
        const size_t n = enter(nano, *compute_stream);
        issue(order.claim(n, side_of(*network_stream)));
        for (int i = 0; i < how.chunks; ++i) {
          const RowChunk c = row_chunk(parts[n].tokens, how.chunks, i);
          if (c.count == 0) continue;
          const Part rows{parts[n].first_row + c.begin, c.count, {}, {}};
          traced(n, first, 1, OpKind::kCompute, *compute_stream, [&] {
            run_op(first.layer, first.op, rows, *compute_stream, sms_of(how.gemm_sm_percent));
          });
          hop->record(*compute_stream);  // after this chunk's GEMM
          hop->wait_on(*network_stream);
          traced(n, reduce, 1, OpKind::kNetwork, *network_stream,
                 [&] { run_op(reduce.layer, reduce.op, rows, *network_stream); });
        }
        order.continue_from(n, side_of(*network_stream));
      },
      comm == nullptr ? 1 : comm->size(), strategy.fused_groups(), strategy.partition());
  strategy.schedule(ctx);
  TESSERA_CHECK(ctx.finished(), ErrorCode::kInternal, "strategy ", strategy.name(),
                " returned before running every operation");
  // Join: the head runs on `stream` after every nano-batch's last operation.
  for (const Stream* side : sides) {
    hop->record(*side);
    hop->wait_on(stream);
  }
}

void LlamaGpuModel::Impl::collect_timeline() {
  if (timeline == nullptr || timed_spans.empty()) return;
  timeline->spans.clear();
  for (TimedSpan& t : timed_spans) {
    t.span.start_us = 1000.0 * double(t.start.elapsed_ms_since(*timeline_origin));
    t.span.end_us = 1000.0 * double(t.end.elapsed_ms_since(*timeline_origin));
    timeline->spans.push_back(t.span);
  }
  timed_spans.clear();
}

}  // namespace tessera::model
