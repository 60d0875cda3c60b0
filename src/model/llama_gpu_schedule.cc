// The layers of a step ordered by a scheduler strategy on the cuda backend (DynaFlow's
// backend): the strategy's nano-batches are parts of the step's buffers (views, no copies),
// each operation runs on its kind's stream (compute on the model's stream, memory-bound and
// network operations on two more), a nano-batch's operation that follows one on another stream
// waits for it through an event, and the side streams fork from the model's stream before the
// layers and join it after them: no host synchronization inside the step, and the whole of it
// can be captured in one CUDA graph.
#include <algorithm>

#include "model/llama_gpu_impl.h"
#include "tessera/core/error.h"
#include "tessera/sched/schedule.h"

namespace tessera::model {

void LlamaGpuModel::Impl::run_scheduled_layers(const Step& step, const sched::Strategy& strategy) {
  if (!memory_stream) {
    memory_stream = Stream::create_cuda(device.index);
    network_stream = Stream::create_cuda(device.index);
    hop = Event::create(stream);
  }
  const std::vector<sched::NanoBatch> nanos = strategy.split(step.batch);
  std::vector<Part> parts;
  for (const sched::NanoBatch& n : nanos) {
    parts.push_back(part_of(step, int64_t(n.first_seq), int64_t(n.num_seqs)));
  }
  auto stream_for = [&](LlamaOp op) -> const Stream& {
    switch (llama_op_kind(op)) {
      case OpKind::kCompute:
        return stream;
      case OpKind::kMemory:
        return *memory_stream;
      case OpKind::kNetwork:
        return *network_stream;
    }
    return stream;
  };
  // Fork: the side streams start after the embedding (and the previous step's head).
  hop->record(stream);
  hop->wait_on(*memory_stream);
  hop->wait_on(*network_stream);
  // The stream each nano-batch's last operation ran on.
  std::vector<const Stream*> last(parts.size(), &stream);
  sched::ScheduleContext ctx(
      shapes.num_layers, nanos,
      [&](const sched::NanoBatch& nano, sched::Step op) {
        const size_t n = size_t(std::find_if(nanos.begin(), nanos.end(),
                                             [&](const sched::NanoBatch& m) {
                                               return m.first_seq == nano.first_seq;
                                             }) -
                                nanos.begin());
        const Stream& on = stream_for(op.op);
        if (last[n] != &on) {  // the operation before it ran elsewhere: wait for it there
          hop->record(*last[n]);
          hop->wait_on(on);
          last[n] = &on;
        }
        run_op(op.layer, op.op, parts[n], on);
      },
      [&](const sched::NanoBatch&, sched::Step first, int count) {
        throw_error(ErrorCode::kUnsupported,
                    str("strategy ", strategy.name(), ": a fused group of ", count,
                        " operations from layer ", first.layer, " ", llama_op_name(first.op),
                        " (an all-reduce and the RMSNorm after it) is not built on cuda"));
      });
  strategy.schedule(ctx);
  TESSERA_CHECK(ctx.finished(), ErrorCode::kInternal, "strategy ", strategy.name(),
                " returned before running every operation");
  // Join: the head runs on `stream` after every nano-batch's last operation.
  for (const Stream* side : {&*memory_stream, &*network_stream}) {
    hop->record(*side);
    hop->wait_on(stream);
  }
}

}  // namespace tessera::model
