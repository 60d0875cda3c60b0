// Multi-process GPU tests: a parent test (Suite.Name) re-launches this test binary once per GPU
// through launch_local_workers, with a gtest filter that selects the worker test
// (SuiteWorker.Name) every rank runs. Worker tests skip when run directly.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm/bootstrap.h"
#include "tessera/core/error.h"
#include "tessera/runtime/stream.h"

namespace tessera::testing {

inline std::string self_executable() {
  char path[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, size_t(n)) : std::string();
}

// Visible GPUs, at most `limit`.
inline int gpus_for_test(int limit) { return std::min(cuda_device_count(), limit); }

// Runs `worker_suite`.`test` on `num_ranks` processes and expects every one to exit 0. Sets
// TESSERA_TIMEOUT_MS to `timeout_ms` for the workers unless the environment already has it.
inline void run_gpu_workers(const std::string& worker_suite, const std::string& test,
                            int num_ranks, int64_t timeout_ms,
                            std::vector<std::pair<std::string, std::string>> env = {}) {
  std::vector<std::string> args = {self_executable(),
                                   "--gtest_filter=" + worker_suite + "." + test};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (std::getenv("TESSERA_TIMEOUT_MS") == nullptr)
    env.push_back({"TESSERA_TIMEOUT_MS", str(timeout_ms)});
  const int status = launch_local_workers(num_ranks, int(args.size()), argv.data(), env);
  EXPECT_EQ(status, 0) << "worker test " << worker_suite << "." << test << " failed on a rank of "
                       << num_ranks << " (its output is above)";
}

}  // namespace tessera::testing

// Skips the calling test unless `available` >= n GPUs.
#define TESSERA_REQUIRE_GPUS(available, n)                                      \
  do {                                                                          \
    if ((available) < (n))                                                      \
      GTEST_SKIP() << "needs " << (n) << " GPUs, " << (available) << " visible"; \
  } while (0)
