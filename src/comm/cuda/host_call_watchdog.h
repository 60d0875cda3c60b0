// HostCallWatchdog: the bound on host calls into a blocking NCCL communicator.
//
// A blocking communicator (the default, nccl_communicator.h) launches each collective on the
// calling thread; a non-blocking one hands every launch to a thread NCCL creates for it, which
// cost 60 to 160 us per small collective on 2 H100s (docs/PERF.md). A blocking call can wait
// inside NCCL for a peer: at init, split and finalize, and where NCCL connects lazily (a
// collective's or a peer's first use). Such a call cannot be interrupted, so while one is armed
// this watchdog's thread ends the process once it has lasted TESSERA_TIMEOUT_MS, after printing
// which call on which rank and group waited (as PyTorch's NCCL watchdog tears a hung process
// down). Waits for the GPU's work are polled and throw kTimeout as before; only calls that sit
// inside NCCL on the host end here.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace tessera::cuda_comm {

class HostCallWatchdog {
 public:
  // `who` names the caller in the message, e.g. "rank 3 on group 'world' (4 ranks)".
  explicit HostCallWatchdog(std::string who);
  ~HostCallWatchdog();
  HostCallWatchdog(const HostCallWatchdog&) = delete;
  HostCallWatchdog& operator=(const HostCallWatchdog&) = delete;

  // Two relaxed stores and a clock read: cheap enough for every collective. `op` must outlive
  // the armed call (a string literal).
  void arm(const char* op, uint64_t number);
  void disarm();

 private:
  void watch();

  const std::string who_;
  std::atomic<int64_t> armed_since_ns_{0};  // 0: nothing armed
  std::atomic<const char*> op_{nullptr};
  std::atomic<uint64_t> number_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Arms `watchdog` (null: nothing to bound) for one call's scope.
class WatchdogScope {
 public:
  WatchdogScope(HostCallWatchdog* watchdog, const char* op, uint64_t number) : watchdog_(watchdog) {
    if (watchdog_) watchdog_->arm(op, number);
  }
  ~WatchdogScope() {
    if (watchdog_) watchdog_->disarm();
  }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;

 private:
  HostCallWatchdog* watchdog_;
};

}  // namespace tessera::cuda_comm
