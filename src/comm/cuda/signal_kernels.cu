// Bounded signal waits and signal writes (see signal_kernels.h for what they compute).
//
// Memory model: a writer makes its data visible before its signal with __threadfence_system()
// followed by a system-scope release store or atomic add; the waiter reads the signal with
// ld.acquire.sys and ends with a system fence, so work enqueued after the wait on the same
// stream observes the data. Both kernels run one thread per signal word: they are latency-bound
// and must not take SMs from the compute they overlap with.
#include "comm/cuda/signal_kernels.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/cuda/device_primitives.cuh"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::cuda_comm {

namespace {

__host__ __device__ inline const char* cmp_symbol(int cmp) {
  switch (cmp) {
    case int(WaitCmp::kEq):
      return "==";
    case int(WaitCmp::kNe):
      return "!=";
    case int(WaitCmp::kGe):
      return ">=";
    case int(WaitCmp::kGt):
      return ">";
  }
  return "?";
}

__device__ __forceinline__ bool satisfies(uint64_t observed, int cmp, uint64_t value) {
  switch (cmp) {
    case int(WaitCmp::kEq):
      return observed == value;
    case int(WaitCmp::kNe):
      return observed != value;
    case int(WaitCmp::kGe):
      return observed >= value;
    case int(WaitCmp::kGt):
      return observed > value;
  }
  return false;
}

struct SignalWaitParams {
  SignalWaitArgs args;
  WaitTimeoutRecord* record;  // host-mapped
  unsigned int* claim;        // device word: the first timed-out wait takes it
};

// One thread. Checks the words in index order, remembering how far it got (words only grow
// towards satisfaction in a barrier; for a single word the index is 0 throughout).
__global__ void signal_wait_kernel(SignalWaitParams p) {
  const SignalWaitArgs& a = p.args;
  const int cmp = int(a.cmp);
  const uint64_t start = global_timer_ns();
  int index = 0;
  uint32_t pause_ns = 32;
  while (true) {
    uint64_t observed = 0;
    while (index < a.num_slots) {
      if (index != a.skip_index) {
        observed = load_acquire_system(a.slots + index);
        if (!satisfies(observed, cmp, a.value)) break;
      }
      ++index;
    }
    if (index == a.num_slots) break;
    const uint64_t waited = global_timer_ns() - start;
    if (waited > a.timeout_ns) {
      const bool barrier = a.barrier_epoch > 0;
      const int from = barrier ? index : a.from_rank;
      const int slot = a.first_slot + index;
      record_wait_timeout(p.record, p.claim, a.rank, slot, from, cmp, a.barrier_epoch, a.value,
                          observed, waited);
      if (barrier) {
        printf(
            "tessera rank %d: timed out after %llu ms in heap barrier #%lld waiting for rank %d "
            "(its barrier slot %d holds %llu, expected %s %llu)\n",
            a.rank, (unsigned long long)(waited / 1000000), (long long)a.barrier_epoch, from, slot,
            (unsigned long long)observed, cmp_symbol(cmp), (unsigned long long)a.value);
      } else {
        printf(
            "tessera rank %d: timed out after %llu ms waiting for signal slot %d from rank %d "
            "(value %llu, expected %s %llu)\n",
            a.rank, (unsigned long long)(waited / 1000000), slot, from,
            (unsigned long long)observed, cmp_symbol(cmp), (unsigned long long)a.value);
      }
      __trap();
    }
    __nanosleep(pause_ns);
    if (pause_ns < 512) pause_ns *= 2;
  }
  // Later work on this stream must see what the signallers wrote before signalling.
  __threadfence_system();
}

struct SignalWriteParams {
  SignalTarget targets[kMaxSignalTargetsPerLaunch];
  int num_targets;
  int op;  // SignalOp
  uint64_t value;
};

// One thread per target.
__global__ void signal_write_kernel(SignalWriteParams p) {
  const int i = threadIdx.x;
  if (i >= p.num_targets) return;
  const SignalTarget t = p.targets[i];
  if (t.delay_ns > 0) {
    const uint64_t start = global_timer_ns();
    while (global_timer_ns() - start < t.delay_ns) __nanosleep(256);
  }
  // Everything this stream wrote before (copies, kernels) becomes visible before the signal.
  __threadfence_system();
  if (p.op == int(SignalOp::kSet)) {
    store_release_system(t.word, p.value);
  } else {
    atomicAdd_system(reinterpret_cast<unsigned long long*>(t.word),
                     static_cast<unsigned long long>(p.value));
  }
}

}  // namespace

namespace {
std::mutex& live_logs_mutex() {
  static std::mutex m;
  return m;
}
std::vector<const WaitTimeoutLog*>& live_logs() {
  static std::vector<const WaitTimeoutLog*> logs;
  return logs;
}
}  // namespace

void throw_if_any_wait_timed_out() {
  std::lock_guard<std::mutex> lock(live_logs_mutex());
  for (const WaitTimeoutLog* log : live_logs()) log->throw_if_timed_out();
}

WaitTimeoutLog::WaitTimeoutLog() {
  try {
    void* host = nullptr;
    TESSERA_CUDA_CHECK(cudaHostAlloc(&host, sizeof(WaitTimeoutRecord), cudaHostAllocMapped));
    std::memset(host, 0, sizeof(WaitTimeoutRecord));
    host_record_ = static_cast<WaitTimeoutRecord*>(host);
    void* device = nullptr;
    TESSERA_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
    device_record_ = static_cast<WaitTimeoutRecord*>(device);
    TESSERA_CUDA_CHECK(cudaMalloc(&device_claim_, sizeof(unsigned int)));
    // Zero before any wait can run (waits run on other, non-blocking streams).
    TESSERA_CUDA_CHECK(cudaMemset(device_claim_, 0, sizeof(unsigned int)));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  } catch (...) {
    if (device_claim_) cudaFree(device_claim_);
    if (host_record_) cudaFreeHost(host_record_);
    throw;
  }
  std::lock_guard<std::mutex> lock(live_logs_mutex());
  live_logs().push_back(this);
}

WaitTimeoutLog::~WaitTimeoutLog() {
  {
    std::lock_guard<std::mutex> lock(live_logs_mutex());
    auto& logs = live_logs();
    logs.erase(std::remove(logs.begin(), logs.end(), this), logs.end());
  }
  // Errors are ignored: after a trap the context is gone and these calls fail harmlessly.
  if (device_claim_) cudaFree(device_claim_);
  if (host_record_) cudaFreeHost(host_record_);
}

bool WaitTimeoutLog::timed_out() const {
  return __atomic_load_n(&host_record_->timed_out, __ATOMIC_ACQUIRE) != 0;
}

std::string wait_timeout_message(const WaitTimeoutRecord& r) {
  const uint64_t ms = r.waited_ns / 1000000;
  if (r.barrier_epoch > 0) {
    return str("rank ", r.rank, ": timed out after ", ms, " ms in heap barrier #", r.barrier_epoch,
               " waiting for rank ", r.from_rank, " (its barrier slot ", r.slot, " holds ",
               r.observed, ", expected ", cmp_symbol(r.cmp), " ", r.expected, ")");
  }
  return str("rank ", r.rank, ": timed out after ", ms, " ms waiting for signal slot ", r.slot,
             " from rank ", r.from_rank, " (value ", r.observed, ", expected ", cmp_symbol(r.cmp),
             " ", r.expected, ")");
}

std::string WaitTimeoutLog::message() const {
  if (!timed_out()) return "";
  WaitTimeoutRecord copy;
  std::memcpy(&copy, const_cast<const WaitTimeoutRecord*>(host_record_), sizeof(copy));
  return wait_timeout_message(copy);
}

void WaitTimeoutLog::throw_if_timed_out() const {
  if (!timed_out()) return;
  throw_error(ErrorCode::kTimeout,
              str(message(), " (TESSERA_TIMEOUT_MS; the CUDA context of this rank is lost)"));
}

void launch_signal_wait(const SignalWaitArgs& args, const WaitTimeoutLog& log,
                        cudaStream_t stream) {
  TESSERA_CHECK(args.slots != nullptr && args.num_slots >= 1, ErrorCode::kInternal,
                "launch_signal_wait: no signal words (slots=", static_cast<const void*>(args.slots),
                ", num_slots=", args.num_slots, ")");
  SignalWaitParams params{args, log.device_record(), log.device_claim()};
  signal_wait_kernel<<<1, 1, 0, stream>>>(params);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_signal_write(const SignalTarget* targets, int num_targets, SignalOp op, uint64_t value,
                         cudaStream_t stream) {
  for (int first = 0; first < num_targets; first += kMaxSignalTargetsPerLaunch) {
    SignalWriteParams params{};
    params.num_targets = std::min(kMaxSignalTargetsPerLaunch, num_targets - first);
    for (int i = 0; i < params.num_targets; ++i) params.targets[i] = targets[first + i];
    params.op = int(op);
    params.value = value;
    signal_write_kernel<<<1, params.num_targets, 0, stream>>>(params);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tessera::cuda_comm
