// StreamOrder (the cuda scheduler's cross-stream order) on simulated streams: random schedules
// of 1 to 4 nano-batches over three sides, fused groups on two sides included. Every operation
// waits, directly or through its side's order, for its nano-batch's previous operation, and no
// event marks another nano-batch's work enqueued after the marked nano-batch's own (the false
// dependency that made a NanoFlow step wait for the other nano-batch's attention).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "sched/stream_order.h"
#include "tessera/core/error.h"

namespace tessera::sched {
namespace {

using Op = std::pair<int, int>;          // (nano-batch, index in its chain)
using Mark = std::pair<size_t, size_t>;  // (side, entries before it)

// Streams as queues: an entry is an operation or a wait for a mark on another side.
class Streams {
 public:
  explicit Streams(size_t sides) : queues_(sides) {}

  void issue(const std::vector<StreamOrder::Action>& actions) {
    for (const StreamOrder::Action& a : actions) {
      if (a.record) {
        EXPECT_EQ(a.on, a.side) << "an event is recorded on its own side";
        record({a.nano, a.side}, a.side);
        // Only the marked nano-batch's work (or none) since its last operation there.
        const std::vector<Entry>& q = queues_[a.side];
        for (size_t i = q.size(); i-- > 0;) {
          if (q[i].op.first == int(a.nano)) break;
          EXPECT_EQ(q[i].op.first, -1) << "event (" << a.nano << ", " << a.side
                                       << ") marks nano-batch " << q[i].op.first << "'s later work";
        }
      } else {
        wait({a.nano, a.side}, a.on);
      }
    }
  }
  void record(std::pair<size_t, size_t> event, size_t side) {
    marks_[event] = {side, queues_[side].size()};
  }
  void wait(std::pair<size_t, size_t> event, size_t on) {
    const auto mark = marks_.find(event);
    ASSERT_NE(mark, marks_.end()) << "a wait for an event never recorded";
    queues_[on].push_back({{-1, -1}, mark->second});
  }
  // Enqueues an operation; returns every operation that happens before it.
  std::set<Op> run(Op op, size_t side) {
    queues_[side].push_back({op, {}});
    return before({side, queues_[side].size() - 1});
  }

 private:
  struct Entry {
    Op op{-1, -1};  // (-1, -1): a wait
    Mark waits_for;
  };
  std::set<Op> before(Mark at) const {
    std::set<Op> out;
    std::vector<Mark> todo = {at};
    std::set<Mark> seen;
    while (!todo.empty()) {
      const Mark m = todo.back();
      todo.pop_back();
      if (!seen.insert(m).second) continue;
      for (size_t i = 0; i < m.second; ++i) {
        const Entry& e = queues_[m.first][i];
        if (e.op.first >= 0)
          out.insert(e.op);
        else
          todo.push_back(e.waits_for);
      }
    }
    return out;
  }

  std::vector<std::vector<Entry>> queues_;
  std::map<std::pair<size_t, size_t>, Mark> marks_;
};

TEST(SchedStreamOrder, EveryOperationFollowsItsChainAndNoEventMarksAnotherNanoBatchsLaterWork) {
  std::mt19937 rng(7);
  constexpr size_t kSides = 3;
  for (int round = 0; round < 300; ++round) {
    const size_t nanos = 1 + rng() % 4;
    StreamOrder order(nanos, kSides);
    Streams streams(kSides);
    std::vector<int> next(nanos, 0);
    for (int step = 0; step < 40; ++step) {
      const size_t n = rng() % nanos, side = rng() % kSides;
      const int index = next[n]++;
      streams.issue(order.enter(n, side));
      const std::set<Op> happened = streams.run({int(n), index}, side);
      if (index > 0) {
        EXPECT_TRUE(happened.count({int(n), index - 1}))
            << "round " << round << ": nano-batch " << n << "'s operation " << index << " on side "
            << side << " does not follow its previous one";
      }
      if (rng() % 4 != 0) continue;
      // A fused group on two sides (the pipelined pair): its second part on `other` after its
      // first through the caller's own event, the chain continuing from `other`.
      const size_t other = (side + 1 + rng() % (kSides - 1)) % kSides;
      const int second = next[n]++;
      streams.issue(order.claim(n, other));
      streams.record({nanos + 1, 0}, side);  // the caller's event: a name StreamOrder never uses
      streams.wait({nanos + 1, 0}, other);
      EXPECT_TRUE(streams.run({int(n), second}, other).count({int(n), index}));
      order.continue_from(n, other);
    }
  }
}

TEST(SchedStreamOrder, RefusesWhatItDoesNotTrack) {
  EXPECT_THROW(StreamOrder(0, 3), Error);
  StreamOrder order(2, 3);
  EXPECT_THROW(order.enter(2, 0), Error);
  EXPECT_THROW(order.enter(0, 3), Error);
  order.enter(0, 0);
  order.enter(1, 1);
  EXPECT_THROW(order.continue_from(0, 1), Error);  // nano-batch 1's work is last on side 1
}

}  // namespace
}  // namespace tessera::sched
