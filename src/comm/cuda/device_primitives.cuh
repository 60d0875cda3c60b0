// Device helpers the communication kernels share: the global nanosecond timer, system-scope
// acquire loads and release stores of 64-bit signal words, a sleep until a timer value, and the
// write of a wait-timeout record (signal_kernels.h).
#pragma once

#include <cstdint>

#include "comm/cuda/signal_kernels.h"

namespace tessera::cuda_comm {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t load_acquire_system(const uint64_t* word) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_system(uint64_t* word, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(word), "l"(v) : "memory");
}

// Returns once %globaltimer >= deadline_ns (coarse sleeps while far, fine ones near).
__device__ __forceinline__ void sleep_until(uint64_t deadline_ns) {
  while (true) {
    const uint64_t now = global_timer_ns();
    if (now >= deadline_ns) return;
    __nanosleep(deadline_ns - now > 2000 ? 1000 : 100);
  }
}

// Fills `record` (host-mapped) once per log: the first timed-out wait to take `claim` writes
// the fields, then `timed_out` after a system fence; true for that one. The caller traps.
__device__ __forceinline__ bool record_wait_timeout(WaitTimeoutRecord* record, unsigned int* claim,
                                                    int rank, int slot, int from_rank, int cmp,
                                                    int64_t barrier_epoch, uint64_t expected,
                                                    uint64_t observed, uint64_t waited_ns) {
  if (atomicCAS(claim, 0u, 1u) != 0u) return false;
  record->rank = rank;
  record->slot = slot;
  record->from_rank = from_rank;
  record->cmp = cmp;
  record->barrier_epoch = barrier_epoch;
  record->expected = expected;
  record->observed = observed;
  record->waited_ns = waited_ns;
  __threadfence_system();
  *reinterpret_cast<volatile uint32_t*>(&record->timed_out) = 1u;
  __threadfence_system();
  return true;
}

}  // namespace tessera::cuda_comm
