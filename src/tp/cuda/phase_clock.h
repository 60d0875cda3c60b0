// When each phase of a tensor-parallel run ended (`tessera bench tp --phases`): CUDA events
// recorded on the streams the phases end on, read once the run's stream has synchronized. Off
// unless enabled; an off clock records nothing, so the runners mark their phases always.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "tessera/tp/operation.h"

namespace tessera::tp::detail {

class PhaseClock {
 public:
  PhaseClock() = default;
  ~PhaseClock();
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  void enable(bool on) { on_ = on; }
  // Begins a run on `stream`: the previous run's marks are forgotten.
  void start(cudaStream_t stream);
  // `name` (with " rank <rank>" when rank >= 0) ended on `stream` (after what was enqueued on it
  // so far). The name is only formed while the clock is on.
  void mark(const char* name, cudaStream_t stream, int rank = -1);
  // The last run's marks in the order made, in us since start(); waits for their events.
  std::vector<TpPhase> read() const;

 private:
  cudaEvent_t event(size_t i);

  bool on_ = false;
  std::vector<cudaEvent_t> events_;  // events_[0]: the start; kept from run to run
  std::vector<std::string> names_;   // of events_[1 .. used_)
  size_t used_ = 0;
};

}  // namespace tessera::tp::detail
