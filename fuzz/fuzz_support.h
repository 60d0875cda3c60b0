// Helpers every fuzz target shares: reporting a finding, and drawing integers that are
// mostly plausible but sometimes at the edges of their type, so one corpus explores both
// real shapes and the bad values an entry point must refuse.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <utility>

namespace tessera::fuzz {

// A finding: print what broke and abort, so libFuzzer saves the input as a crash.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "\n==== tessera fuzz finding ====\n%s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Values at the edges of int64 and int32, where overflow and sign bugs live.
inline int64_t edge_value(FuzzedDataProvider& in) {
  constexpr int64_t kEdges[] = {0,
                                -1,
                                1,
                                2,
                                std::numeric_limits<int32_t>::max(),
                                int64_t(std::numeric_limits<int32_t>::max()) + 1,
                                std::numeric_limits<int32_t>::min(),
                                int64_t(1) << 40,
                                int64_t(1) << 62,
                                std::numeric_limits<int64_t>::max(),
                                std::numeric_limits<int64_t>::min()};
  return kEdges[in.ConsumeIntegralInRange<size_t>(0, std::size(kEdges) - 1)];
}

// Mostly a value in [lo, hi] (the bounds in either order); one time in 16 an edge value, one
// in 32 any int64. Callers narrow to int by clamping (a wrap would hide the value the entry
// really sees).
inline int64_t draw(FuzzedDataProvider& in, int64_t lo, int64_t hi) {
  if (lo > hi) std::swap(lo, hi);
  const uint8_t pick = in.ConsumeIntegral<uint8_t>();
  if (pick >= 248) return in.ConsumeIntegral<int64_t>();
  if (pick >= 232) return edge_value(in);
  return in.ConsumeIntegralInRange<int64_t>(lo, hi);
}

inline int draw_int(FuzzedDataProvider& in, int lo, int hi) {
  const int64_t v = draw(in, lo, hi);
  if (v > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
  if (v < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  return int(v);
}

// Mostly any finite double; one time in 8 a value finite arithmetic never gives.
inline double draw_double(FuzzedDataProvider& in) {
  constexpr double kSpecial[] = {
      std::numeric_limits<double>::quiet_NaN(),  std::numeric_limits<double>::infinity(),
      -std::numeric_limits<double>::infinity(),  -0.0,
      std::numeric_limits<double>::denorm_min(), 1e300};
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    return kSpecial[in.ConsumeIntegralInRange<size_t>(0, std::size(kSpecial) - 1)];
  }
  return in.ConsumeFloatingPoint<double>();
}

// The files a table fuzzer uses, under /tmp and per process: `input` holds the fuzzer's bytes
// (the table file to read), `copy` what the writer writes back. Both removed when done.
struct TableFiles {
  TableFiles(const char* table, const uint8_t* data, size_t size)
      : input(path(table, "in")), copy(path(table, "copy")) {
    std::ofstream(input, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  ~TableFiles() {
    std::remove(input.c_str());
    std::remove(copy.c_str());
  }
  TableFiles(const TableFiles&) = delete;
  TableFiles& operator=(const TableFiles&) = delete;

  const std::string input, copy;

 private:
  static std::string path(const char* table, const char* what) {
    return "/tmp/tessera_fuzz_" + std::string(table) + "_" + std::to_string(::getpid()) + "_" +
           what + ".tsv";
  }
};

// Whether a time read back from a table is the one written: writers print 6 significant digits.
inline bool same_time(double a, double b) {
  return std::fabs(a - b) <= 1e-5 * std::max(std::fabs(a), std::fabs(b));
}

}  // namespace tessera::fuzz
