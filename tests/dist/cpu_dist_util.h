// Helpers for the multi-rank tests on the cpu backend: the (ranks, machines) layouts every
// test sweeps, inputs that encode (rank, index), a scoped wait-timeout override and a
// checker that an Error has the expected code and message parts.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"

namespace tessera::testing {

struct Layout {
  int ranks;
  int machines;
};

// 1..8 ranks in 1..4 machines (every machine count that divides the ranks).
inline std::vector<Layout> all_layouts() {
  std::vector<Layout> layouts;
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int machines = 1; machines <= 4; ++machines) {
      if (ranks % machines == 0) layouts.push_back({ranks, machines});
    }
  }
  return layouts;
}

inline std::string layout_name(const Layout& l) {
  return str(l.ranks, " ranks x ", l.machines, " machines");
}

// Small heaps: tests never need the 1 GiB default.
inline ContextOptions test_options(bool create_heap = true) {
  ContextOptions o;
  o.heap_bytes = size_t(1) << 20;
  o.create_heap = create_heap;
  return o;
}

// Value for element `index` of rank `rank`, distinct for every (rank, index).
inline uint64_t encode(int rank, int64_t index) {
  return (uint64_t(rank + 1) << 40) | uint64_t(index);
}

// Sets the wait timeout for the scope of a test.
class ScopedWaitTimeout {
 public:
  explicit ScopedWaitTimeout(int64_t ms) { kWaitTimeoutMs.override(ms); }
  ~ScopedWaitTimeout() { kWaitTimeoutMs.clear_override(); }
};

// Runs `fn`, expecting a tessera::Error with `code` whose message contains every part.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a tessera::Error (" << error_code_name(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "missing '" << part << "' in: " << e.what();
    }
  }
}

}  // namespace tessera::testing
