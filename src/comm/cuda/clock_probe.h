// Offsets between the GPUs' %globaltimer clocks, so that kernels on different GPUs can compare
// times: the shared emulated links (paced_copy.h, LinkClocks) keep one clock per NIC that
// every GPU reserves time on.
//
// Protocol (ping-pong through peer memory, rank 0 is the time base): rank r > 0 stores probe
// number k into its request word in rank 0's memory and notes its send time t1; rank 0's
// server sees it, stores its own time T0 into r's reply words, then k; r notes the arrival
// t2. Over kClockProbeRounds rounds r keeps the round with the shortest round trip and takes
// offset = T0 - (t1 + t2) / 2 (the error is at most half that round trip, ~1-2 us on NVLink).
// Each side waits at most `timeout_ns` per probe and reports who it waited for.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda_comm {

constexpr int kClockProbeRounds = 16;
constexpr int kMaxClockProbeClients = 64;

// Device-written result of one side, read by the host after the kernels finished.
struct ClockProbeResult {
  int64_t offset_ns = 0;       // client: rank 0's clock minus this GPU's
  uint64_t round_trip_ns = 0;  // client: the shortest round trip
  int32_t timed_out = 0;       // 1: a wait gave up
  int32_t waited_for = -1;     // the rank that did not answer (server: the client)
  uint64_t round = 0;          // the probe number it waited for
};

// Rank 0: answers kClockProbeRounds probes of every client in turn. `requests[c]` is the local
// request word of client c, `reply_words[c]` its two reply words (peer-mapped: [0] the
// probe number, [1] rank 0's time), `client_ranks[c]` its rank (for reports). Probe numbers
// start after `first_round` (so the words need no reset between calibrations).
struct ClockProbeServerArgs {
  const uint64_t* requests[kMaxClockProbeClients] = {};
  uint64_t* reply_words[kMaxClockProbeClients] = {};
  int client_ranks[kMaxClockProbeClients] = {};
  int num_clients = 0;
  uint64_t first_round = 0;
  uint64_t timeout_ns = 0;
};
void launch_clock_probe_server(const ClockProbeServerArgs& args, ClockProbeResult* result,
                               cudaStream_t stream);

// Rank r > 0: `request` is its request word at rank 0 (peer-mapped), `reply_words` its two
// local reply words.
struct ClockProbeClientArgs {
  uint64_t* request = nullptr;
  const uint64_t* reply_words = nullptr;
  uint64_t first_round = 0;
  uint64_t timeout_ns = 0;
};
void launch_clock_probe_client(const ClockProbeClientArgs& args, ClockProbeResult* result,
                               cudaStream_t stream);

}  // namespace tessera::cuda_comm
