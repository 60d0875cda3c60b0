// Helpers for the bootstrap tests: an environment guard that clears every launcher variable
// and restores them, and a wait-timeout override for one test.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "tessera/core/params.h"

namespace tessera::testing {

// Every variable detect_launch() or launched_as_worker() reads.
inline constexpr const char* kLauncherVariables[] = {"TESSERA_BOOTSTRAP_ADDR",
                                                     "TESSERA_RANK",
                                                     "TESSERA_WORLD_SIZE",
                                                     "TESSERA_LOCAL_RANK",
                                                     "TESSERA_LOCAL_SIZE",
                                                     "RANK",
                                                     "WORLD_SIZE",
                                                     "LOCAL_RANK",
                                                     "LOCAL_WORLD_SIZE",
                                                     "MASTER_ADDR",
                                                     "MASTER_PORT",
                                                     "TORCHELASTIC_USE_AGENT_STORE",
                                                     "TESSERA_HUB_PORT_OFFSET",
                                                     "OMPI_COMM_WORLD_RANK",
                                                     "OMPI_COMM_WORLD_SIZE",
                                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                     "PMI_RANK",
                                                     "PMI_SIZE",
                                                     "PMIX_RANK",
                                                     "MPI_LOCALRANKID",
                                                     "MPI_LOCALNRANKS",
                                                     "PMI_LOCAL_RANK",
                                                     "PMI_LOCAL_SIZE",
                                                     "SLURM_PROCID",
                                                     "SLURM_NTASKS",
                                                     "SLURM_LOCALID",
                                                     "SLURM_NTASKS_PER_NODE",
                                                     "SLURM_TASKS_PER_NODE",
                                                     "SLURM_NODEID",
                                                     "SLURM_NNODES"};

// Clears the launcher variables on construction; set() adds some; all are restored after.
class ScopedLaunchEnv {
 public:
  ScopedLaunchEnv() {
    for (const char* name : kLauncherVariables) unset(name);
  }
  ~ScopedLaunchEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ScopedLaunchEnv(const ScopedLaunchEnv&) = delete;
  ScopedLaunchEnv& operator=(const ScopedLaunchEnv&) = delete;

  void set(const std::string& name, const std::string& value) {
    save(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    save(name);
    ::unsetenv(name.c_str());
  }

 private:
  void save(const std::string& name) {
    if (saved_.count(name)) return;
    const char* value = std::getenv(name.c_str());
    saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

// Overrides wait_timeout_ms() for one test.
class ScopedWaitTimeout {
 public:
  explicit ScopedWaitTimeout(int64_t ms) { kWaitTimeoutMs.override(ms); }
  ~ScopedWaitTimeout() { kWaitTimeoutMs.clear_override(); }
  ScopedWaitTimeout(const ScopedWaitTimeout&) = delete;
  ScopedWaitTimeout& operator=(const ScopedWaitTimeout&) = delete;
};

}  // namespace tessera::testing
