// launch_local_workers(): the single-host launcher of the `tessera` CLI and the multi-process
// tests. It opens a tcp bootstrap hub on 127.0.0.1 (a free port), re-executes this program
// (/proc/self/exe, same argv) once per worker with TESSERA_BOOTSTRAP_ADDR, TESSERA_RANK,
// TESSERA_WORLD_SIZE, TESSERA_LOCAL_RANK, TESSERA_LOCAL_SIZE and the caller's extra variables
// set, serves the hub in a thread and reaps the workers.
//
// Failure handling: the first worker that exits non-zero or dies is reported on stderr; the
// others get wait_timeout_ms() to finish (they usually fail fast on their own, told by the
// hub), then SIGTERM, then SIGKILL after a short grace. Workers get PR_SET_PDEATHSIG so they
// do not outlive a launcher that is killed. CUDA is not touched: workers pick device = local
// rank themselves; CUDA_VISIBLE_DEVICES is passed through unchanged.
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap_internal.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"

extern char** environ;

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

// An exit status as a shell reports it: the exit code, or 128 + the signal number.
int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string describe_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return str(128 + sig, " (killed by signal ", sig, ": ", strsignal(sig), ")");
  }
  return str(exit_status_of(wait_status));
}

// The variables the launcher sets; inherited values of these are replaced, not duplicated.
std::vector<std::string> environment_for_worker(
    const std::vector<std::pair<std::string, std::string>>& set_vars) {
  std::set<std::string> replaced;
  for (const auto& [key, value] : set_vars) replaced.insert(key);
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    std::string key = eq ? std::string(*entry, size_t(eq - *entry)) : std::string(*entry);
    if (replaced.count(key) == 0) env.emplace_back(*entry);
  }
  for (const auto& [key, value] : set_vars) env.push_back(key + "=" + value);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The child side of fork(): only async-signal-safe calls until execve.
[[noreturn]] void exec_worker(pid_t launcher, char** argv, char** envp) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != launcher) ::_exit(1);  // the launcher died before prctl took effect
  ::execve("/proc/self/exe", argv, envp);
  static const char kMessage[] = "tessera launcher: execve(/proc/self/exe) failed in a worker\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  ::_exit(127);
}

void launcher_message(const std::string& message) {
  std::fprintf(stderr, "[tessera launcher] %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace

int launch_local_workers(int num_workers, int argc, char** argv,
                         const std::vector<std::pair<std::string, std::string>>& extra_env) {
  TESSERA_CHECK_ARG(num_workers >= 1, "launch_local_workers: num_workers = ", num_workers,
                    ": expected >= 1");
  TESSERA_CHECK_ARG(argc >= 1 && argv != nullptr && argv[0] != nullptr,
                    "launch_local_workers: argc = ", argc,
                    ": expected argv with at least the program name");
  for (const auto& [key, value] : extra_env) {
    TESSERA_CHECK_ARG(!key.empty() && key.find('=') == std::string::npos,
                      "launch_local_workers: extra_env key '", key,
                      "': expected a non-empty variable name without '='");
  }
  const int64_t timeout_ms = wait_timeout_ms();
  detail::TcpHubServer hub(num_workers, "127.0.0.1", 0);
  const std::string hub_address = str("127.0.0.1:", hub.port());

  // Everything the children need is built before fork(): after it they may not allocate.
  std::vector<std::string> argv_strings(argv, argv + argc);
  std::vector<char*> child_argv = c_strings(argv_strings);
  std::vector<std::vector<std::string>> env_strings;
  std::vector<std::vector<char*>> child_envs;
  for (int r = 0; r < num_workers; ++r) {
    std::vector<std::pair<std::string, std::string>> vars = {
        {"TESSERA_BOOTSTRAP_ADDR", hub_address},
        {"TESSERA_RANK", std::to_string(r)},
        {"TESSERA_WORLD_SIZE", std::to_string(num_workers)},
        {"TESSERA_LOCAL_RANK", std::to_string(r)},
        {"TESSERA_LOCAL_SIZE", std::to_string(num_workers)},
    };
    vars.insert(vars.end(), extra_env.begin(), extra_env.end());
    env_strings.push_back(environment_for_worker(vars));
  }
  for (auto& strings : env_strings) child_envs.push_back(c_strings(strings));

  std::fflush(stdout);  // buffered output would otherwise be written by every child too
  std::fflush(stderr);
  const pid_t launcher = ::getpid();
  std::vector<pid_t> pids(num_workers, -1);
  for (int r = 0; r < num_workers; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) exec_worker(launcher, child_argv.data(), child_envs[r].data());
    if (pid < 0) {
      int err = errno;
      for (int s = 0; s < r; ++s) ::kill(pids[s], SIGKILL);
      for (int s = 0; s < r; ++s) ::waitpid(pids[s], nullptr, 0);
      throw_error(ErrorCode::kSystem, str("launch_local_workers: fork() for worker rank ", r,
                                          " of ", num_workers, ": ", std::strerror(err)));
    }
    pids[r] = pid;
  }
  TESSERA_LOG(kDebug, "launched ", num_workers, " workers; bootstrap hub at ", hub_address);

  std::string hub_error;
  std::thread hub_thread([&] {
    try {
      hub.serve();
    } catch (const std::exception& e) {
      hub_error = e.what();
    }
  });

  std::vector<bool> running(num_workers, true);
  int num_running = num_workers;
  int first_failure = 0;
  int first_failed_rank = -1;
  bool sent_term = false, sent_kill = false;
  Clock::time_point term_at{}, kill_at{};
  const auto kill_grace = std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 100, 3000));
  auto poll_interval = std::chrono::milliseconds(1);
  while (num_running > 0) {
    for (int r = 0; r < num_workers; ++r) {
      if (!running[r]) continue;
      int wait_status = 0;
      pid_t rc = ::waitpid(pids[r], &wait_status, WNOHANG);
      if (rc == 0) continue;
      if (rc < 0 && errno == EINTR) continue;
      running[r] = false;
      --num_running;
      int status = rc < 0 ? 1 : exit_status_of(wait_status);
      if (status == 0) continue;
      if (sent_term) {
        launcher_message(str("worker rank ", r, " stopped by the launcher, status ",
                             describe_status(wait_status)));
        continue;
      }
      launcher_message(
          rc < 0 ? str("worker rank ", r, ": its exit status was lost (", std::strerror(errno), ")")
                 : str("worker rank ", r, " exited with status ", describe_status(wait_status)));
      if (first_failure == 0) {
        first_failure = status;
        first_failed_rank = r;
        term_at = Clock::now() + std::chrono::milliseconds(timeout_ms);
      }
    }
    if (num_running == 0) break;
    auto now = Clock::now();
    if (first_failure != 0 && !sent_term && now >= term_at) {
      std::vector<int> left;
      for (int r = 0; r < num_workers; ++r) {
        if (running[r]) left.push_back(r);
      }
      std::string ranks;
      for (int r : left) ranks += str(ranks.empty() ? "" : ", ", r);
      launcher_message(str("worker rank ", first_failed_rank, " failed and ranks ", ranks,
                           " are still running after ", timeout_ms, " ms: sending SIGTERM"));
      for (int r : left) ::kill(pids[r], SIGTERM);
      sent_term = true;
      kill_at = now + kill_grace;
    }
    if (sent_term && !sent_kill && now >= kill_at) {
      for (int r = 0; r < num_workers; ++r) {
        if (running[r]) ::kill(pids[r], SIGKILL);
      }
      sent_kill = true;
    }
    std::this_thread::sleep_for(poll_interval);
    poll_interval = std::min(poll_interval * 2, std::chrono::milliseconds(20));
  }

  hub.request_stop();
  hub_thread.join();
  if (!hub_error.empty() && first_failure != 0) {
    TESSERA_LOG(kWarn, "bootstrap hub: ", hub_error);
  } else if (!hub_error.empty()) {
    TESSERA_LOG(kInfo, "bootstrap hub: ", hub_error);
  }
  return first_failure;
}

}  // namespace tessera
