// Helpers of the fault tests on the cpu backend: a scoped TESSERA_CPU_FAULT and a stopwatch.
#pragma once

#include <chrono>
#include <string>

#include "comm/cpu/cpu_fault.h"

namespace tessera::testing {

using FaultClock = std::chrono::steady_clock;

inline double ms_since(FaultClock::time_point start) {
  return std::chrono::duration<double, std::milli>(FaultClock::now() - start).count();
}

// Sets TESSERA_CPU_FAULT (src/comm/cpu/cpu_fault.h) for the scope of a test.
class ScopedCpuFault {
 public:
  explicit ScopedCpuFault(const std::string& spec) { cpu::kCpuFault.override(spec); }
  ~ScopedCpuFault() { cpu::kCpuFault.clear_override(); }
};

}  // namespace tessera::testing
