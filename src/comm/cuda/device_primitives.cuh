// Device helpers the communication kernels share: the global nanosecond timer, system-scope
// acquire loads and release stores of 64-bit signal words, and a sleep until a timer value.
#pragma once

#include <cstdint>

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

}  // namespace tessera::cuda_comm
