// What the sanitize stage (scripts/gpu_sanitize.sh) asks of the GPU tests through the
// environment: its tools run kernels two orders of magnitude slower, so the tests run fewer
// cases and replays there (one case per path of each kernel); the test stage runs them all.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace tessera::test {

// 100 graph replays, or TESSERA_TEST_REPLAYS (at least 2).
inline int graph_replays() {
  const char* env = std::getenv("TESSERA_TEST_REPLAYS");
  if (env == nullptr) return 100;
  const int n = std::atoi(env);
  if (n < 2) ADD_FAILURE() << "TESSERA_TEST_REPLAYS = '" << env << "': expected an integer >= 2";
  return std::max(n, 2);
}

// TESSERA_TEST_CASES=few: each test runs its `few` cases instead of `all`.
inline bool few_cases() {
  const char* env = std::getenv("TESSERA_TEST_CASES");
  if (env == nullptr || std::string_view(env) == "all") return false;
  if (std::string_view(env) != "few") ADD_FAILURE() << "TESSERA_TEST_CASES = '" << env << "': expected few or all";
  return true;
}

template <class Case>
std::vector<Case> pick(std::vector<Case> all, std::vector<Case> few) {
  return few_cases() ? few : all;
}

}  // namespace tessera::test
