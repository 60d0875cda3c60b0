// TESSERA_CPU_FAULT: one rank of a cpu run dies or stalls at its N-th communication call
// (see cpu_fault.h).
#include "comm/cpu/cpu_fault.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"

namespace tessera::cpu {

const Param<std::string> kCpuFault(
    "TESSERA_CPU_FAULT", "",
    "test hook, cpu backend: <die|stall>:<rank>:<call> makes that world rank die (throw) or "
    "stall (sleep twice TESSERA_TIMEOUT_MS) at its <call>-th communication call");

namespace {

struct RankFaults {
  bool active = false;  // this thread is a cpu rank
  FaultSpec spec;
  int rank = -1;
  int64_t calls = 0;
};

thread_local RankFaults tls_faults;

// A whole decimal number in [min, max], or -1 when the text is not one.
int64_t parse_count(const std::string& text, int64_t min, int64_t max) {
  if (text.empty() || text.size() > 18) return -1;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
  }
  const int64_t v = std::strtoll(text.c_str(), nullptr, 10);
  return v >= min && v <= max ? v : -1;
}

}  // namespace

FaultSpec fault_spec_from_params(int world_size) {
  FaultSpec spec;
  spec.text = kCpuFault.get();
  if (spec.text.empty()) return spec;
  const std::string expected =
      str("': expected <die|stall>:<rank>:<call> with a rank from 0 to ", world_size - 1,
          " (of this run's ", world_size, ") and a call >= 1, e.g. die:1:10");
  const size_t a = spec.text.find(':');
  const size_t b = a == std::string::npos ? a : spec.text.find(':', a + 1);
  TESSERA_CHECK_ARG(b != std::string::npos, kCpuFault.name(), " = '", spec.text, expected);
  const std::string kind = spec.text.substr(0, a);
  TESSERA_CHECK_ARG(kind == "die" || kind == "stall", kCpuFault.name(), " = '", spec.text,
                    expected);
  spec.kind = kind == "die" ? FaultSpec::Kind::kDie : FaultSpec::Kind::kStall;
  spec.rank = int(parse_count(spec.text.substr(a + 1, b - a - 1), 0, world_size - 1));
  spec.call = parse_count(spec.text.substr(b + 1), 1, int64_t(1) << 60);
  TESSERA_CHECK_ARG(spec.rank >= 0 && spec.call >= 1, kCpuFault.name(), " = '", spec.text,
                    expected);
  return spec;
}

ScopedRankFaults::ScopedRankFaults(const FaultSpec& spec, int rank) {
  tls_faults = RankFaults{true, spec, rank, 0};
}

ScopedRankFaults::~ScopedRankFaults() {
  tls_faults = RankFaults{};
}

void fault_point(const char* op) {
  RankFaults* f = &tls_faults;
  if (!f->active) return;
  const int64_t call = ++f->calls;
  if (f->spec.kind == FaultSpec::Kind::kNone || f->rank != f->spec.rank || call != f->spec.call) {
    return;
  }
  const std::string what =
      str("injected fault (", kCpuFault.name(), "=", f->spec.text, "): rank ", f->rank, " ",
          f->spec.kind == FaultSpec::Kind::kDie ? "died" : "stalled",
          " at its communication call #", call, " (", op, ")");
  if (f->spec.kind == FaultSpec::Kind::kDie) throw_error(ErrorCode::kSystem, what);
  const int64_t stall_ms = 2 * wait_timeout_ms();
  TESSERA_LOG(kWarn, what, ": sleeping ", stall_ms, " ms");
  std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
}

int64_t communication_calls() {
  return tls_faults.calls;
}

}  // namespace tessera::cpu
