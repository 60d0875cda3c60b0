// Fault injection on the cpu backend, for tests of what the other ranks do when one fails.
//
// TESSERA_CPU_FAULT = <kind>:<rank>:<call> makes world rank <rank> of every cpu run fail at
// its <call>-th communication call (1-based; every collective, send, recv, heap allocation,
// put, get, signal, wait and barrier of any group or heap counts one), inside whatever runs
// it (a sequence-parallel plan, a benchmark):
//   die    the call throws (kSystem), as a rank whose process died would stop; run_cpu_ranks
//          marks the rank failed, so the ranks waiting for it stop with kPeerFailure.
//   stall  the call first sleeps twice the wait timeout (TESSERA_TIMEOUT_MS), as a rank that
//          hangs would: the ranks waiting for it time out naming it; then it goes on.
// Empty (the default) injects nothing. Each rank thread counts its own calls (a thread-local
// counter that run_cpu_ranks installs), so the cost when unset is one branch per call.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/core/params.h"

namespace tessera::cpu {

extern const Param<std::string> kCpuFault;  // TESSERA_CPU_FAULT

struct FaultSpec {
  enum class Kind { kNone, kDie, kStall };
  Kind kind = Kind::kNone;
  int rank = -1;
  int64_t call = 0;
  std::string text;  // as configured, for messages
};

// Parses TESSERA_CPU_FAULT for a run of `world_size` ranks; throws kInvalidArgument naming the
// variable, its text and the expected form.
FaultSpec fault_spec_from_params(int world_size);

// Installs, for this thread (rank `rank` of a cpu run), a call counter that applies `spec`;
// removed at the end of the scope.
class ScopedRankFaults {
 public:
  ScopedRankFaults(const FaultSpec& spec, int rank);
  ~ScopedRankFaults();
  ScopedRankFaults(const ScopedRankFaults&) = delete;
  ScopedRankFaults& operator=(const ScopedRankFaults&) = delete;
};

// Counts one communication call `op` of this thread's rank and applies the fault when it is
// the configured one. No effect on threads that are not cpu ranks.
void fault_point(const char* op);

// Communication calls this thread's rank made so far in its run (0 outside a cpu rank), so a
// test can aim a fault at the middle of a phase.
int64_t communication_calls();

}  // namespace tessera::cpu
