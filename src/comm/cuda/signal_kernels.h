// Signal kernels shared by the cuda symmetric heaps (nvshmem_heap, ipc_heap) and the paced
// transport:
//   - the bounded wait: one thread spins with ld.acquire.sys on local 64-bit signal words until
//     each of them satisfies `word <cmp> value`, or until %globaltimer passes the timeout. On
//     timeout it writes who waited for whom into a WaitTimeoutRecord in host-mapped pinned
//     memory, printf's the same and traps (the CUDA context is lost; the host reads the record
//     afterwards through WaitTimeoutLog::throw_if_timed_out).
//   - the signal write: __threadfence_system, then a system-scope release store (kSet) or
//     atomic add (kAdd) into a (possibly peer) signal word, optionally no earlier than a delay
//     after the kernel started (the emulated link's latency).
// Assumptions: signal words are 8-byte aligned device memory that this GPU can load/store
// (local or a peer mapping); one rank per process, so a record names one rank.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "tessera/comm/symmetric_heap.h"

namespace tessera::cuda_comm {

// Written by the device (fields first, `timed_out` last after a system fence), read by the
// host. Lives in cudaHostAlloc'ed mapped memory, so the host can read it after a trap killed
// the CUDA context.
struct WaitTimeoutRecord {
  uint32_t timed_out;  // 1 once a wait timed out
  int32_t rank;        // the waiting rank
  int32_t slot;        // the signal slot it waited on (barrier: the slot of `from_rank`)
  int32_t from_rank;   // the rank expected to signal (-1: several)
  int32_t cmp;         // WaitCmp
  int32_t reserved;
  int64_t barrier_epoch;  // > 0 when the wait was a heap barrier
  uint64_t expected;
  uint64_t observed;
  uint64_t waited_ns;
};

// Owns the record (pinned, mapped) and a device word that lets exactly one timed-out wait write
// it. One per heap.
class WaitTimeoutLog {
 public:
  WaitTimeoutLog();
  ~WaitTimeoutLog();
  WaitTimeoutLog(const WaitTimeoutLog&) = delete;
  WaitTimeoutLog& operator=(const WaitTimeoutLog&) = delete;

  WaitTimeoutRecord* device_record() const { return device_record_; }
  unsigned int* device_claim() const { return device_claim_; }
  bool timed_out() const;
  // The message of the recorded timeout ("" when none).
  std::string message() const;
  // Throws kTimeout with message() when a wait timed out.
  void throw_if_timed_out() const;

 private:
  WaitTimeoutRecord* host_record_ = nullptr;
  WaitTimeoutRecord* device_record_ = nullptr;
  unsigned int* device_claim_ = nullptr;
};

// A bounded wait on `num_slots` consecutive local words starting at `slots`; the word at index
// `skip_index` (if >= 0) is not checked. num_slots = 1 is an ordinary wait_signal; a heap
// barrier waits on one word per rank (skipping its own).
struct SignalWaitArgs {
  const uint64_t* slots = nullptr;
  int num_slots = 1;
  int skip_index = -1;
  WaitCmp cmp = WaitCmp::kGe;
  uint64_t value = 0;
  // For the timeout message.
  int rank = 0;
  int first_slot = 0;  // slot number of slots[0]
  int from_rank = -1;  // single wait: the expected signaller; barrier: ignored (index = rank)
  int64_t barrier_epoch = 0;
  uint64_t timeout_ns = 0;
};
void launch_signal_wait(const SignalWaitArgs& args, const WaitTimeoutLog& log, cudaStream_t stream);

// One signal word to write and how long after the kernel starts (the emulated latency).
struct SignalTarget {
  uint64_t* word = nullptr;
  uint64_t delay_ns = 0;
};
constexpr int kMaxSignalTargetsPerLaunch = 64;
// Writes `value` with `op` into every target (one thread each). Prior work on `stream` (copies,
// kernels) is visible to a reader that observes the new value with acquire semantics.
void launch_signal_write(const SignalTarget* targets, int num_targets, SignalOp op, uint64_t value,
                         cudaStream_t stream);

// Throws the first recorded timeout of any live WaitTimeoutLog of this process (every heap
// registers its log). For code outside the heaps that sees a CUDA error after a trap, e.g.
// NcclCommunicator::synchronize, so the user learns who waited for whom.
void throw_if_any_wait_timed_out();

// The message both the device printf and WaitTimeoutLog use.
std::string wait_timeout_message(const WaitTimeoutRecord& record);

}  // namespace tessera::cuda_comm
