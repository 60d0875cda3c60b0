#include "sched/stream_order.h"

#include "tessera/core/error.h"

namespace tessera::sched {

StreamOrder::StreamOrder(size_t nanos, size_t sides) : owner_(sides, kNone), last_(nanos, kNone) {
  TESSERA_CHECK_ARG(nanos >= 1 && sides >= 1, "StreamOrder: ", nanos, " nano-batches, ", sides,
                    " sides: expected at least one of each");
}

void StreamOrder::check(size_t n, size_t side) const {
  TESSERA_CHECK_ARG(n < last_.size() && side < owner_.size(), "StreamOrder: nano-batch ", n,
                    " on side ", side, ": expected a nano-batch below ", last_.size(),
                    " and a side below ", owner_.size());
}

void StreamOrder::mark_others(size_t n, size_t side, std::vector<Action>& out) {
  if (owner_[side] != n && owner_[side] != kNone) out.push_back({true, owner_[side], side, side});
  owner_[side] = n;
}

std::vector<StreamOrder::Action> StreamOrder::enter(size_t n, size_t to) {
  check(n, to);
  std::vector<Action> out;
  const size_t from = last_[n];
  if (from != to && from != kNone) {  // before its first operation the fork ordered it
    if (owner_[from] == n) out.push_back({true, n, from, from});
    out.push_back({false, n, from, to});
  }
  last_[n] = to;
  mark_others(n, to, out);
  return out;
}

std::vector<StreamOrder::Action> StreamOrder::claim(size_t n, size_t side) {
  check(n, side);
  std::vector<Action> out;
  mark_others(n, side, out);
  return out;
}

void StreamOrder::continue_from(size_t n, size_t side) {
  check(n, side);
  TESSERA_CHECK_ARG(owner_[side] == n, "StreamOrder: nano-batch ", n, " continues from side ", side,
                    ", where it has not claimed the last work");
  last_[n] = side;
}

}  // namespace tessera::sched
