// CpuWorld: bounded rendezvous and mailboxes shared by the rank threads of one cpu group.
#include "comm/cpu/cpu_world.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/core/params.h"

namespace tessera::cpu {

namespace {
// How often a waiting rank wakes to look at the failure state (a failure does not notify
// every group's condition variable).
constexpr auto kFailurePollInterval = std::chrono::milliseconds(5);
}  // namespace

int64_t elapsed_ms(CpuWorld::Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(CpuWorld::Clock::now() - start)
      .count();
}

FailureState::FailureState(int world_size) : messages_(world_size) {}

void FailureState::mark_failed(int global_rank, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (global_rank < 0 || global_rank >= int(messages_.size())) return;
  if (!messages_[global_rank]) messages_[global_rank] = message;
  any_.store(true, std::memory_order_release);
}

int FailureState::first_failed(const std::vector<int>& global_ranks, std::string* message) const {
  if (!any()) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  int found = -1;
  for (int r : global_ranks) {
    if (r >= 0 && r < int(messages_.size()) && messages_[r] && (found < 0 || r < found)) {
      found = r;
    }
  }
  if (found >= 0 && message) *message = *messages_[found];
  return found;
}

CpuWorld::CpuWorld(std::string name, std::vector<int> global_ranks,
                   std::shared_ptr<FailureState> failure)
    : name_(std::move(name)), global_ranks_(std::move(global_ranks)), failure_(std::move(failure)) {
  for (int r = 0; r < size(); ++r) identity_ = identity_ && global_ranks_[r] == r;
}

std::string CpuWorld::rank_label(int group_rank) const {
  const int g = global_ranks_[group_rank];
  if (identity_) return str("rank ", g);
  return str("rank ", g, " (group rank ", group_rank, ")");
}

std::string CpuWorld::ranks_label(const std::vector<int>& group_ranks) const {
  std::string s = group_ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < group_ranks.size(); ++i) s += str(i ? ", " : "", group_ranks[i]);
  if (!identity_) {
    s += group_ranks.size() == 1 ? " (world rank " : " (world ranks ";
    for (size_t i = 0; i < group_ranks.size(); ++i) {
      s += str(i ? ", " : "", global_ranks_[group_ranks[i]]);
    }
    s += ")";
  }
  return s;
}

template <typename Ready, typename Pending>
CpuWorld::WaitOutcome CpuWorld::wait_bounded(std::unique_lock<std::mutex>& lock,
                                             Clock::time_point deadline, Ready ready,
                                             Pending pending, std::string* failed) {
  while (true) {
    // Readiness first: once satisfied it stays so, even if a peer failed afterwards.
    if (ready()) return WaitOutcome::kReady;
    if (failure_->any()) {
      std::vector<int> awaited;
      for (int r : pending()) awaited.push_back(global_ranks_[r]);
      std::string message;
      int rank = failure_->first_failed(awaited, &message);
      if (rank >= 0) {
        *failed = str("rank ", rank, " failed: ", message);
        return WaitOutcome::kPeerFailed;
      }
    }
    auto now = Clock::now();
    if (now >= deadline) return WaitOutcome::kTimedOut;
    cv_.wait_until(lock, std::min(deadline, now + kFailurePollInterval));
  }
}

std::shared_ptr<CollectiveSlot> CpuWorld::arrive(int rank, uint64_t seq, const std::string& op,
                                                 const Contribution& mine) {
  const auto start = Clock::now();
  const int64_t timeout_ms = wait_timeout_ms();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mutex_);

  if (auto it = abandoned_.find(seq); it != abandoned_.end()) {
    throw_error(it->second.code,
                str(rank_label(rank), " arrived at ", op, " #", seq, " on group '", name_,
                    "' after the other ranks gave up on it: ", it->second.message));
  }
  std::shared_ptr<CollectiveSlot>& entry = slots_[seq];
  if (!entry) entry = std::make_shared<CollectiveSlot>(size());
  std::shared_ptr<CollectiveSlot> slot = entry;
  slot->ops[rank] = op;
  slot->posted[rank] = true;
  slot->contributions[rank] = mine;
  ++slot->num_posted;
  cv_.notify_all();

  auto missing = [&] {
    std::vector<int> m;
    for (int r = 0; r < size(); ++r) {
      if (!slot->posted[r]) m.push_back(r);
    }
    return m;
  };
  std::string failed;
  WaitOutcome outcome = wait_bounded(
      lock, deadline, [&] { return slot->num_posted == size() || slot->abandoned; }, missing,
      &failed);

  if (outcome != WaitOutcome::kReady || slot->num_posted < size()) {
    std::string message;
    ErrorCode code = ErrorCode::kTimeout;
    if (outcome == WaitOutcome::kTimedOut) {
      message = str(rank_label(rank), " waited ", elapsed_ms(start), " ms in ", op, " #", seq,
                    " on group '", name_, "' for ", ranks_label(missing()), " that never arrived");
    } else if (outcome == WaitOutcome::kPeerFailed) {
      code = ErrorCode::kPeerFailure;
      message = str(rank_label(rank), " stopped waiting in ", op, " #", seq, " on group '", name_,
                    "' after ", elapsed_ms(start), " ms: ", failed);
    } else {  // another rank abandoned the slot while we waited
      code = abandoned_[seq].code;
      message = str(rank_label(rank), " stopped waiting in ", op, " #", seq, " on group '", name_,
                    "': ", abandoned_[seq].message);
    }
    if (!slot->abandoned) {
      slot->abandoned = true;
      abandoned_[seq] = {code, message};
    }
    lock.unlock();
    release(seq, *slot);
    throw_error(code, message);
  }

  // Every rank posted: all of them see the same ops, so all throw the same error.
  for (int r = 1; r < size(); ++r) {
    if (slot->ops[r] != slot->ops[0]) {
      std::string calls;
      for (int q = 0; q < size(); ++q) calls += str(q ? ", " : "", "rank ", q, ": ", slot->ops[q]);
      lock.unlock();
      release(seq, *slot);
      throw_error(
          ErrorCode::kInvalidArgument,
          str("collective #", seq, " on group '", name_, "': ranks called different collectives (",
              calls, "): expected every rank to call the same one in the same order"));
    }
  }
  return slot;
}

void CpuWorld::finish(int rank, uint64_t seq, const std::string& op, CollectiveSlot& slot,
                      bool wait_for_all) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(wait_timeout_ms());
  std::unique_lock<std::mutex> lock(mutex_);
  ++slot.num_finished;
  cv_.notify_all();
  if (!wait_for_all) return;
  auto still_reading = [&] {
    // Which ranks are still reading is not tracked; name every rank but this one.
    std::vector<int> others;
    for (int r = 0; r < size(); ++r) {
      if (r != rank) others.push_back(r);
    }
    return others;
  };
  std::string failed;
  WaitOutcome outcome = wait_bounded(
      lock, deadline, [&] { return slot.num_finished == size(); }, still_reading, &failed);
  if (outcome == WaitOutcome::kTimedOut) {
    throw_error(ErrorCode::kTimeout,
                str(rank_label(rank), " waited ", elapsed_ms(start), " ms in ", op, " #", seq,
                    " on group '", name_, "' for ", size() - slot.num_finished,
                    " rank(s) to finish reading its buffers"));
  }
  if (outcome == WaitOutcome::kPeerFailed) {
    throw_error(ErrorCode::kPeerFailure,
                str(rank_label(rank), " stopped waiting in ", op, " #", seq, " on group '", name_,
                    "' for peers to finish reading: ", failed));
  }
}

void CpuWorld::release(uint64_t seq, CollectiveSlot& slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++slot.num_released;
  // Only ranks that posted hold the slot; an abandoned slot never gets more of them.
  if (slot.num_released == slot.num_posted && (slot.num_posted == size() || slot.abandoned)) {
    auto it = slots_.find(seq);
    if (it != slots_.end() && it->second.get() == &slot) slots_.erase(it);
  }
}

std::shared_ptr<CpuWorld> CpuWorld::child(CollectiveSlot& slot, int color, const std::string& name,
                                          const std::vector<int>& member_group_ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<CpuWorld>& c = slot.children[color];
  if (!c) {
    std::vector<int> globals;
    for (int r : member_group_ranks) globals.push_back(global_ranks_[r]);
    c = std::make_shared<CpuWorld>(name, std::move(globals), failure_);
  }
  return c;
}

void CpuWorld::post(int src, int dst, Message message) {
  std::lock_guard<std::mutex> lock(mutex_);
  mailboxes_[{src, dst}].push_back(std::move(message));
  cv_.notify_all();
}

Message CpuWorld::take(int src, int dst, uint64_t recv_idx) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(wait_timeout_ms());
  std::unique_lock<std::mutex> lock(mutex_);
  std::deque<Message>& box = mailboxes_[{src, dst}];
  std::string failed;
  WaitOutcome outcome = wait_bounded(
      lock, deadline, [&] { return !box.empty(); }, [&] { return std::vector<int>{src}; }, &failed);
  if (outcome == WaitOutcome::kTimedOut) {
    throw_error(
        ErrorCode::kTimeout,
        str(rank_label(dst), " waited ", elapsed_ms(start), " ms in recv #", recv_idx, " from ",
            ranks_label({src}), " on group '", name_, "': ", ranks_label({src}), " never sent it"));
  }
  if (outcome == WaitOutcome::kPeerFailed) {
    throw_error(ErrorCode::kPeerFailure,
                str(rank_label(dst), " stopped waiting in recv #", recv_idx, " from ",
                    ranks_label({src}), " on group '", name_, "': ", failed));
  }
  Message m = std::move(box.front());
  box.pop_front();
  return m;
}

}  // namespace tessera::cpu
