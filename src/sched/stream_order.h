// The cross-stream order of a scheduled step's nano-batches (the cuda model's
// llama_gpu_schedule.cc), kept apart from CUDA so the cpu tests check it. Streams are sides
// 0..S-1; each nano-batch's operations form a chain, each after the one before it wherever that
// ran. An event recorded on a stream marks everything enqueued there so far, so a nano-batch
// that changes sides must wait for an event recorded right after its own last operation on the
// side it leaves, never for the side's tail, which may hold another nano-batch's later work (a
// NanoFlow step waited for the other nano-batch's attention that way). Event (n, s), one per
// nano-batch and side, is that mark: recorded when another nano-batch is about to enqueue on s,
// or when n leaves s with nothing after its work there.
#pragma once

#include <cstddef>
#include <vector>

namespace tessera::sched {

class StreamOrder {
 public:
  // Record event (nano, side) on `side`, or make side `on` wait for it.
  struct Action {
    bool record = false;
    size_t nano = 0, side = 0, on = 0;
  };

  // Throws kInvalidArgument unless nanos >= 1 and sides >= 1.
  StreamOrder(size_t nanos, size_t sides);

  // Nano-batch n's next operation goes on side `to`: the actions to issue before it.
  std::vector<Action> enter(size_t n, size_t to);
  // n also enqueues work on `side`, ordered by the caller (a fused group on two sides): the
  // actions to issue before it (marks of other nano-batches' work there).
  std::vector<Action> claim(size_t n, size_t side);
  // n's chain continues from its work on `side` (enqueued last, after a claim).
  void continue_from(size_t n, size_t side);

 private:
  void mark_others(size_t n, size_t side, std::vector<Action>& out);
  void check(size_t n, size_t side) const;

  static constexpr size_t kNone = size_t(-1);
  std::vector<size_t> owner_;  // per side: the nano-batch whose work was enqueued there last
  std::vector<size_t> last_;   // per nano-batch: the side of its last operation
};

}  // namespace tessera::sched
