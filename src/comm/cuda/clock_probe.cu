// Clock probe kernels (see clock_probe.h). One thread each: they measure latency, so nothing
// else may run in between; system-scope release stores and acquire loads order the words.
#include "comm/cuda/clock_probe.h"

#include "comm/cuda/device_primitives.cuh"

#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::cuda_comm {

namespace {

// Spins until *word >= value; false after timeout_ns.
__device__ bool wait_for(const uint64_t* word, uint64_t value, uint64_t timeout_ns) {
  const uint64_t start = global_timer_ns();
  while (load_acquire_system(word) < value) {
    if (global_timer_ns() - start > timeout_ns) return false;
  }
  return true;
}

__global__ void clock_probe_server_kernel(ClockProbeServerArgs a, ClockProbeResult* result) {
  for (int c = 0; c < a.num_clients; ++c) {
    for (uint64_t k = a.first_round + 1; k <= a.first_round + kClockProbeRounds; ++k) {
      if (!wait_for(a.requests[c], k, a.timeout_ns)) {
        result->timed_out = 1;
        result->waited_for = a.client_ranks[c];
        result->round = k;
        return;
      }
      store_release_system(a.reply_words[c] + 1, global_timer_ns());
      store_release_system(a.reply_words[c], k);
    }
  }
}

__global__ void clock_probe_client_kernel(ClockProbeClientArgs a, ClockProbeResult* result) {
  uint64_t best_round_trip = ~uint64_t(0);
  int64_t best_offset = 0;
  for (uint64_t k = a.first_round + 1; k <= a.first_round + kClockProbeRounds; ++k) {
    const uint64_t sent = global_timer_ns();
    store_release_system(a.request, k);
    if (!wait_for(a.reply_words, k, a.timeout_ns)) {
      result->timed_out = 1;
      result->waited_for = 0;
      result->round = k;
      return;
    }
    const uint64_t arrived = global_timer_ns();
    const uint64_t server_time = load_acquire_system(a.reply_words + 1);
    if (arrived - sent < best_round_trip) {
      best_round_trip = arrived - sent;
      // Midpoints of unsigned times, then the signed difference.
      best_offset = int64_t(server_time) - int64_t(sent + (arrived - sent) / 2);
    }
  }
  result->offset_ns = best_offset;
  result->round_trip_ns = best_round_trip;
}

}  // namespace

void launch_clock_probe_server(const ClockProbeServerArgs& args, ClockProbeResult* result,
                               cudaStream_t stream) {
  TESSERA_CHECK_ARG(args.num_clients >= 0 && args.num_clients <= kMaxClockProbeClients,
                    "clock probe: ", args.num_clients, " clients; expected 0..",
                    kMaxClockProbeClients);
  clock_probe_server_kernel<<<1, 1, 0, stream>>>(args, result);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_clock_probe_client(const ClockProbeClientArgs& args, ClockProbeResult* result,
                               cudaStream_t stream) {
  TESSERA_CHECK_ARG(args.request != nullptr && args.reply_words != nullptr,
                    "clock probe: request word ", static_cast<void*>(args.request),
                    ", reply words ", static_cast<const void*>(args.reply_words),
                    "; expected device words");
  clock_probe_client_kernel<<<1, 1, 0, stream>>>(args, result);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda_comm
