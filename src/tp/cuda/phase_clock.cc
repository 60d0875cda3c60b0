#include "tp/cuda/phase_clock.h"

#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::tp::detail {

PhaseClock::~PhaseClock() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t PhaseClock::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    TESSERA_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[i];
}

void PhaseClock::start(cudaStream_t stream) {
  if (!on_) return;
  names_.clear();
  TESSERA_CUDA_CHECK(cudaEventRecord(event(0), stream));
  used_ = 1;
}

void PhaseClock::mark(const char* name, cudaStream_t stream, int rank) {
  if (!on_ || used_ == 0) return;
  TESSERA_CUDA_CHECK(cudaEventRecord(event(used_), stream));
  names_.push_back(rank >= 0 ? str(name, " rank ", rank) : std::string(name));
  ++used_;
}

std::vector<TpPhase> PhaseClock::read() const {
  std::vector<TpPhase> phases;
  if (!on_ || used_ == 0) return phases;
  for (size_t i = 1; i < used_; ++i) {
    TESSERA_CUDA_CHECK(cudaEventSynchronize(events_[i]));
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[i]));
    phases.push_back({names_[i - 1], 1000.0 * ms});
  }
  return phases;
}

}  // namespace tessera::tp::detail
