// CpuWorld: the state the rank threads of one cpu-backend group share, and the bounded
// rendezvous every cpu collective is built on.
//
// A collective is numbered by a per-rank sequence counter (ranks call collectives on a group
// in the same order, as with NCCL); "#seq" in messages counts every collective on the group
// (barrier and split included) from 1. Collective #seq has one slot: each rank posts a
// Contribution (its buffer addresses and sizes) and waits until every rank posted; then each
// rank reads its peers' buffers directly (threads share the address space) and, when it
// lent a buffer others read, waits until every rank finished reading before returning.
// Point-to-point messages go through per-(sender, receiver) mailboxes: send copies the bytes
// into the queue and returns, recv takes the oldest message, so sends never block.
//
// Every wait is bounded by wait_timeout_ms() and checks the shared FailureState: a rank
// whose body threw (run_cpu_ranks marks it) makes the ranks waiting for it stop with
// kPeerFailure instead of waiting out the timeout. A rank that gives up on collective #seq
// marks it abandoned, so a late rank never reads buffers whose owners already returned.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::cpu {

// Which ranks of one cpu run failed and why; shared by the world and every group split off it.
class FailureState {
 public:
  explicit FailureState(int world_size);
  void mark_failed(int global_rank, const std::string& message);
  bool any() const { return any_.load(std::memory_order_acquire); }
  // The lowest failed rank among `global_ranks` (its message in *message), or -1.
  int first_failed(const std::vector<int>& global_ranks, std::string* message) const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::optional<std::string>> messages_;
  std::atomic<bool> any_{false};
};

// What one rank brings to collective #seq.
struct Contribution {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t send_bytes = 0;
  size_t recv_bytes = 0;
  DType dtype = DType::kF32;
  int64_t count = 0;  // elements in send
  int64_t arg0 = 0;   // op-specific: reduce op, split color, allocation bytes
  int64_t arg1 = 0;   // op-specific: split key, heap offset
};

class CpuWorld;

struct CollectiveSlot {
  explicit CollectiveSlot(int size) : ops(size), posted(size, false), contributions(size) {}
  std::vector<std::string> ops;  // what each rank called
  std::vector<bool> posted;
  std::vector<Contribution> contributions;
  int num_posted = 0;
  int num_finished = 0;  // ranks done reading peers' buffers
  int num_released = 0;
  bool abandoned = false;
  std::map<int, std::shared_ptr<CpuWorld>> children;  // split(): new group per color
};

// A point-to-point message in a mailbox.
struct Message {
  std::vector<std::byte> bytes;
  DType dtype = DType::kF32;
  int64_t count = 0;
};

class CpuWorld {
 public:
  using Clock = std::chrono::steady_clock;

  // `global_ranks[r]` is the world rank of group rank r.
  CpuWorld(std::string name, std::vector<int> global_ranks, std::shared_ptr<FailureState> failure);

  int size() const { return int(global_ranks_.size()); }
  const std::string& name() const { return name_; }
  int global_rank(int group_rank) const { return global_ranks_[group_rank]; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const std::shared_ptr<FailureState>& failure() const { return failure_; }

  // "rank 3" in the world group; "rank 3 (group rank 1)" in a sub-group.
  std::string rank_label(int group_rank) const;
  // "rank 2" / "ranks 2, 3", with world ranks added in a sub-group.
  std::string ranks_label(const std::vector<int>& group_ranks) const;

  // Posts `mine` as `rank`'s part of collective `seq` (named `op`) and waits, bounded, until
  // every rank posted. Throws kTimeout (naming the ranks that never arrived), kPeerFailure
  // (a rank we wait for failed) or kInvalidArgument (ranks called different collectives).
  // The caller must call release() exactly once for the returned slot.
  std::shared_ptr<CollectiveSlot> arrive(int rank, uint64_t seq, const std::string& op,
                                         const Contribution& mine);
  // Marks `rank` done reading peers' buffers; with `wait_for_all`, waits (bounded) until every
  // rank is, so the caller's own buffers are no longer read when it returns.
  void finish(int rank, uint64_t seq, const std::string& op, CollectiveSlot& slot,
              bool wait_for_all);
  // The rank no longer uses the slot; the last one frees it.
  void release(uint64_t seq, CollectiveSlot& slot);

  // split(): the group of `color` made from `slot` (created once, by the first rank asking).
  std::shared_ptr<CpuWorld> child(CollectiveSlot& slot, int color, const std::string& name,
                                  const std::vector<int>& member_group_ranks);

  // Mailboxes: post never blocks; take waits (bounded) for the oldest message from `src`.
  // `recv_idx` numbers the receiver's recvs from src (for messages).
  void post(int src, int dst, Message message);
  Message take(int src, int dst, uint64_t recv_idx);

 private:
  enum class WaitOutcome { kReady, kTimedOut, kPeerFailed };
  // Waits on cv_ (lock held) until ready(), the deadline, or a failure of one of the ranks
  // pending() returns (group ranks). On kPeerFailed, *failed names the rank and its message.
  template <typename Ready, typename Pending>
  WaitOutcome wait_bounded(std::unique_lock<std::mutex>& lock, Clock::time_point deadline,
                           Ready ready, Pending pending, std::string* failed);

  std::string name_;
  std::vector<int> global_ranks_;
  std::shared_ptr<FailureState> failure_;
  bool identity_ = true;  // group rank == world rank for every member

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<uint64_t, std::shared_ptr<CollectiveSlot>> slots_;
  struct Abandonment {
    ErrorCode code;
    std::string message;
  };
  std::map<uint64_t, Abandonment> abandoned_;  // seq -> why (kept: late ranks must not wait)
  std::map<std::pair<int, int>, std::deque<Message>> mailboxes_;
};

// Milliseconds elapsed since `start`, for messages.
int64_t elapsed_ms(CpuWorld::Clock::time_point start);

}  // namespace tessera::cpu
