// HostCallWatchdog (see the header).
#include "comm/cuda/host_call_watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tessera/core/params.h"

namespace tessera::cuda_comm {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The exit status of a process the watchdog ends (timeout(1)'s).
constexpr int kTimedOutExitStatus = 124;

}  // namespace

HostCallWatchdog::HostCallWatchdog(std::string who) : who_(std::move(who)) {
  thread_ = std::thread([this] { watch(); });
}

HostCallWatchdog::~HostCallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void HostCallWatchdog::arm(const char* op, uint64_t number) {
  op_.store(op, std::memory_order_relaxed);
  number_.store(number, std::memory_order_relaxed);
  armed_since_ns_.store(std::max<int64_t>(1, now_ns()), std::memory_order_release);
}

void HostCallWatchdog::disarm() {
  armed_since_ns_.store(0, std::memory_order_release);
}

void HostCallWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    const int64_t timeout_ms = wait_timeout_ms();
    // A tenth of the bound between looks (1 to 100 ms): the overshoot stays small.
    wake_.wait_for(lock, std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms / 10, 1, 100)));
    const int64_t since = armed_since_ns_.load(std::memory_order_acquire);
    if (stop_ || since == 0) continue;
    const int64_t waited_ms = (now_ns() - since) / 1000000;
    if (waited_ms < timeout_ms) continue;
    const char* op = op_.load(std::memory_order_relaxed);
    std::fprintf(stderr,
                 "tessera %s: %s #%llu has waited inside NCCL on the host for %lld ms "
                 "(TESSERA_TIMEOUT_MS = %lld): a peer did not take part. A blocking NCCL call "
                 "cannot be interrupted, so the process exits (TESSERA_NCCL_NONBLOCKING=1 makes "
                 "such waits throw kTimeout instead, at a launch thread per collective)\n",
                 who_.c_str(), op ? op : "an NCCL call",
                 static_cast<unsigned long long>(number_.load(std::memory_order_relaxed)),
                 static_cast<long long>(waited_ms), static_cast<long long>(timeout_ms));
    std::fflush(stderr);
    std::_Exit(kTimedOutExitStatus);
  }
}

}  // namespace tessera::cuda_comm
