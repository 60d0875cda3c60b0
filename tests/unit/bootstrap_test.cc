// The tcp bootstrap in one process (a TcpBootstrapHub and one thread per rank over loopback):
// allgather with rank-encoded blobs, allgather_strings of different lengths, broadcast,
// barrier; a rank that never connects or never arrives (kTimeout naming it), a rank that
// leaves (kPeerFailure naming it), protocol errors; torchrun-style rank 0 hosting. Then
// launch_local_workers, which re-executes this test binary with a filter selecting the
// BootstrapWorker tests (they only run when launched as a worker) and checks exit statuses.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/comm/bootstrap.h"
#include "tessera/core/error.h"
#include "unit/bootstrap_test_util.h"

namespace tessera {
namespace {

using testing::ScopedLaunchEnv;
using testing::ScopedWaitTimeout;
using Clock = std::chrono::steady_clock;

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Serves a TcpBootstrapHub in a thread; join() returns what serve() threw (or null).
class HubThread {
 public:
  explicit HubThread(int size) : hub_(size) {
    thread_ = std::thread([this] {
      try {
        hub_.serve();
      } catch (...) {
        error_ = std::current_exception();
      }
    });
  }
  ~HubThread() {
    if (thread_.joinable()) thread_.join();
  }
  std::string address() const { return hub_.address(); }
  std::exception_ptr join() {
    thread_.join();
    return error_;
  }

 private:
  TcpBootstrapHub hub_;
  std::thread thread_;
  std::exception_ptr error_;
};

LaunchInfo cli_launch(int rank, int size, const std::string& address) {
  LaunchInfo info;
  info.source = "tessera-cli";
  info.rank = rank;
  info.size = size;
  info.local_rank = rank;
  info.local_size = size;
  info.hub_address = address;
  return info;
}

// What one rank's failure looked like.
struct RankOutcome {
  bool threw = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  int64_t elapsed_ms = 0;
};

// Runs body(rank) on one thread per rank; a tessera::Error is recorded in the outcome.
std::vector<RankOutcome> run_ranks(int size,
                                   const std::function<void(int, Clock::time_point&)>& body) {
  std::vector<RankOutcome> outcomes(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Clock::time_point start = Clock::now();
      try {
        body(r, start);
      } catch (const Error& e) {
        outcomes[r].threw = true;
        outcomes[r].code = e.code();
        outcomes[r].message = e.what();
      }
      outcomes[r].elapsed_ms = ms_since(start);
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

std::string hub_error_message(std::exception_ptr error, ErrorCode* code) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(BootstrapTcp, CollectivesOverLoopback) {
  ScopedWaitTimeout timeout(10000);
  constexpr int kRanks = 4;
  HubThread hub(kRanks);
  auto outcomes = run_ranks(kRanks, [&](int rank, Clock::time_point&) {
    auto bootstrap = bootstrap_from_launch(cli_launch(rank, kRanks, hub.address()));
    EXPECT_STREQ(bootstrap->kind(), "tcp");
    EXPECT_EQ(bootstrap->rank(), rank);
    EXPECT_EQ(bootstrap->size(), kRanks);
    EXPECT_EQ(bootstrap->local_rank(), rank);
    EXPECT_EQ(bootstrap->local_size(), kRanks);

    // Several rounds of different sizes; word i of rank r in round k encodes (r, k, i).
    for (uint32_t round = 0; round < 3; ++round) {
      const size_t words = 1 + 7 * round;
      std::vector<uint32_t> mine(words), all(words * kRanks, 0xdeadbeef);
      for (size_t i = 0; i < words; ++i) mine[i] = (uint32_t(rank) << 24) | (round << 16) | i;
      bootstrap->allgather(mine.data(), all.data(), words * sizeof(uint32_t));
      for (int r = 0; r < kRanks; ++r) {
        for (size_t i = 0; i < words; ++i) {
          ASSERT_EQ(all[r * words + i], (uint32_t(r) << 24) | (round << 16) | i)
              << "rank " << rank << " round " << round << " from rank " << r << " word " << i;
        }
      }
    }
    // A larger blob than one socket buffer.
    std::vector<uint8_t> big(300 * 1024), big_all(big.size() * kRanks);
    for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(rank * 31 + i);
    bootstrap->allgather(big.data(), big_all.data(), big.size());
    for (int r = 0; r < kRanks; ++r) {
      for (size_t i = 0; i < big.size(); i += 4099) {
        ASSERT_EQ(big_all[r * big.size() + i], uint8_t(r * 31 + i));
      }
    }

    // Strings of different lengths, one empty.
    std::string mine = std::string(size_t(rank) * 5, char('a' + rank));
    auto strings = bootstrap->allgather_strings(mine);
    ASSERT_EQ(strings.size(), size_t(kRanks));
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(strings[r], std::string(size_t(r) * 5, char('a' + r)));
    }

    uint64_t value = rank == 2 ? 0x0123456789abcdefull : uint64_t(rank);
    bootstrap->broadcast(&value, sizeof(value), 2);
    EXPECT_EQ(value, 0x0123456789abcdefull);

    bootstrap->barrier();
    bootstrap->allgather(nullptr, nullptr, 0);
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_FALSE(outcomes[r].threw) << outcomes[r].message;
  ErrorCode code{};
  EXPECT_EQ(hub_error_message(hub.join(), &code), "");
}

TEST(BootstrapTcp, RankThatNeverConnectsTimesOut) {
  ScopedWaitTimeout timeout(300);
  constexpr int kRanks = 4;
  HubThread hub(kRanks);
  auto outcomes = run_ranks(kRanks - 1, [&](int rank, Clock::time_point& start) {
    auto bootstrap = bootstrap_from_launch(cli_launch(rank, kRanks, hub.address()));
    start = Clock::now();
    bootstrap->barrier();
  });
  for (int r = 0; r < kRanks - 1; ++r) {
    EXPECT_TRUE(outcomes[r].threw);
    EXPECT_EQ(outcomes[r].code, ErrorCode::kTimeout) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 3 never connected")) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, str("rank ", r, ": the bootstrap hub at ")))
        << outcomes[r].message;
    EXPECT_LT(outcomes[r].elapsed_ms, 800) << outcomes[r].message;
  }
  ErrorCode code{};
  std::string hub_message = hub_error_message(hub.join(), &code);
  EXPECT_EQ(code, ErrorCode::kTimeout);
  EXPECT_TRUE(contains(hub_message, "rank 3 never connected")) << hub_message;
}

TEST(BootstrapTcp, RankThatNeverArrivesTimesOut) {
  ScopedWaitTimeout timeout(300);
  constexpr int kRanks = 3;
  HubThread hub(kRanks);
  std::atomic<int> finished{0};
  auto outcomes = run_ranks(kRanks, [&](int rank, Clock::time_point& start) {
    auto bootstrap = bootstrap_from_launch(cli_launch(rank, kRanks, hub.address()));
    bootstrap->barrier();
    if (rank == 1) {  // stays connected but skips the second round
      while (finished.load() < kRanks - 1)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    start = Clock::now();
    try {
      bootstrap->barrier();
    } catch (...) {
      ++finished;
      throw;
    }
    ++finished;
  });
  EXPECT_FALSE(outcomes[1].threw) << outcomes[1].message;
  for (int r : {0, 2}) {
    EXPECT_EQ(outcomes[r].code, ErrorCode::kTimeout) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "allgather round 2")) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 1 never arrived")) << outcomes[r].message;
    EXPECT_LT(outcomes[r].elapsed_ms, 800) << outcomes[r].message;
  }
  ErrorCode code{};
  hub_error_message(hub.join(), &code);
  EXPECT_EQ(code, ErrorCode::kTimeout);
}

TEST(BootstrapTcp, RankThatLeavesIsPeerFailure) {
  ScopedWaitTimeout timeout(5000);  // the failure must come from the departure, not a timeout
  constexpr int kRanks = 3;
  HubThread hub(kRanks);
  auto outcomes = run_ranks(kRanks, [&](int rank, Clock::time_point& start) {
    auto bootstrap = bootstrap_from_launch(cli_launch(rank, kRanks, hub.address()));
    bootstrap->barrier();
    if (rank == 2) return;  // closes its bootstrap after one round
    start = Clock::now();
    bootstrap->barrier();
  });
  EXPECT_FALSE(outcomes[2].threw) << outcomes[2].message;
  for (int r : {0, 1}) {
    EXPECT_EQ(outcomes[r].code, ErrorCode::kPeerFailure) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 2 (pid")) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "closed its bootstrap after 1 allgather round"))
        << outcomes[r].message;
    EXPECT_LT(outcomes[r].elapsed_ms, 2000) << outcomes[r].message;
  }
  ErrorCode code{};
  hub_error_message(hub.join(), &code);
  EXPECT_EQ(code, ErrorCode::kPeerFailure);
}

TEST(BootstrapTcp, UnusableAfterAnError) {
  ScopedWaitTimeout timeout(300);
  HubThread hub(2);
  auto outcomes = run_ranks(1, [&](int rank, Clock::time_point&) {
    auto bootstrap = bootstrap_from_launch(cli_launch(rank, 2, hub.address()));
    EXPECT_THROW(bootstrap->barrier(), Error);
    bootstrap->barrier();
  });
  EXPECT_EQ(outcomes[0].code, ErrorCode::kPeerFailure) << outcomes[0].message;
  EXPECT_TRUE(contains(outcomes[0].message, "unusable after an earlier error"))
      << outcomes[0].message;
  hub.join();
}

TEST(BootstrapTcp, LengthMismatchNamesRanks) {
  ScopedWaitTimeout timeout(5000);
  HubThread hub(2);
  auto outcomes = run_ranks(2, [&](int rank, Clock::time_point&) {
    auto bootstrap = bootstrap_from_launch(cli_launch(rank, 2, hub.address()));
    std::vector<uint8_t> mine(8 * (rank + 1)), all(mine.size() * 2);
    bootstrap->allgather(mine.data(), all.data(), mine.size());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].code, ErrorCode::kInvalidArgument) << outcomes[r].message;
    const std::string& m = outcomes[r].message;
    EXPECT_TRUE(contains(m, "rank 1 sent 16 bytes but rank 0 sent 8") ||
                contains(m, "rank 0 sent 8 bytes but rank 1 sent 16"))
        << m;
  }
  ErrorCode code{};
  hub_error_message(hub.join(), &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
}

TEST(BootstrapTcp, DuplicateRankIsReportedToEveryone) {
  ScopedWaitTimeout timeout(5000);
  HubThread hub(2);
  std::atomic<bool> first_connected{false};
  auto outcomes = run_ranks(2, [&](int thread, Clock::time_point&) {
    // The second connects once the first has (a connection that arrives after the hub
    // failed could only be refused).
    while (thread == 1 && !first_connected)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto bootstrap = bootstrap_from_launch(cli_launch(0, 2, hub.address()));
    first_connected = true;
    bootstrap->barrier();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].code, ErrorCode::kInvalidArgument) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 0 connected to the bootstrap hub"))
        << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "twice")) << outcomes[r].message;
  }
  ErrorCode code{};
  hub_error_message(hub.join(), &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
}

TEST(BootstrapTcp, WrongWorldSizeIsRejected) {
  ScopedWaitTimeout timeout(5000);
  HubThread hub(2);
  std::atomic<bool> first_connected{false};
  auto outcomes = run_ranks(2, [&](int rank, Clock::time_point&) {
    while (rank == 1 && !first_connected) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto bootstrap = bootstrap_from_launch(cli_launch(rank, rank == 1 ? 3 : 2, hub.address()));
    first_connected = true;
    bootstrap->barrier();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].code, ErrorCode::kInvalidArgument) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "with world size 3 but the hub serves 2"))
        << outcomes[r].message;
  }
  hub.join();
}

// A port nobody listens on (bound, then released).
int unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(BootstrapTcp, NoHubIsConnectTimeout) {
  ScopedWaitTimeout timeout(200);
  std::string address = str("127.0.0.1:", unused_port());
  auto start = Clock::now();
  try {
    bootstrap_from_launch(cli_launch(1, 2, address));
    ADD_FAILURE() << "connected to " << address;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 1 could not connect to the bootstrap hub at " + address))
        << e.what();
  }
  EXPECT_LT(ms_since(start), 1000);
}

TEST(BootstrapTcp, TorchrunRankZeroHostsTheHub) {
  ScopedWaitTimeout timeout(10000);
  constexpr int kRanks = 3;
  const std::string address = str("127.0.0.1:", unused_port());
  auto start = Clock::now();
  auto outcomes = run_ranks(kRanks, [&](int rank, Clock::time_point&) {
    LaunchInfo info = cli_launch(rank, kRanks, address);
    info.source = "torchrun";
    auto bootstrap = bootstrap_from_launch(info);
    auto names = bootstrap->allgather_strings(str("rank-", rank));
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(names[r], str("rank-", r));
    bootstrap->barrier();
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_FALSE(outcomes[r].threw) << outcomes[r].message;
  EXPECT_LT(ms_since(start), 5000);  // rank 0's hub stops as soon as everyone left
}

TEST(BootstrapTcp, HubValidatesArguments) {
  EXPECT_THROW(TcpBootstrapHub(0), Error);
  ScopedWaitTimeout timeout(2000);
  HubThread hub(1);
  auto bootstrap = bootstrap_from_launch(cli_launch(0, 1, hub.address()));
  EXPECT_THROW(bootstrap->allgather(nullptr, nullptr, 4), Error);
  EXPECT_THROW(bootstrap->broadcast(nullptr, 4, 0), Error);
  EXPECT_THROW(bootstrap->broadcast(nullptr, 0, 1), Error);
  uint32_t value = 7, gathered = 0;
  bootstrap->allgather(&value, &gathered, sizeof(value));
  EXPECT_EQ(gathered, 7u);
  bootstrap.reset();
  EXPECT_EQ(hub.join(), nullptr);
}

// ----------------------------------------------------------------------------------------
// launch_local_workers: this binary re-executed with --gtest_filter=BootstrapWorker.*

// Per-test worker behaviour, passed through the environment:
//   TESSERA_TEST_WORKER_DIR   where each worker writes rank<R>.txt ("ok" or its error)
//   TESSERA_TEST_FAIL_RANK    the rank that fails after the first collectives
//   TESSERA_TEST_FAIL_HOW     "exit3": exits with status 3; "kill": SIGKILLs itself
//   TESSERA_TEST_OTHERS       "leave" (default): close and exit 0; "hang": sleep (to be
//                             stopped by the launcher); "barrier": wait for the failed rank
TEST(BootstrapWorker, Body) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs only as a worker of launch_local_workers";
  const char* dir = std::getenv("TESSERA_TEST_WORKER_DIR");
  ASSERT_NE(dir, nullptr);
  const int fail_rank =
      std::getenv("TESSERA_TEST_FAIL_RANK") ? std::atoi(std::getenv("TESSERA_TEST_FAIL_RANK")) : -1;
  const std::string fail_how =
      std::getenv("TESSERA_TEST_FAIL_HOW") ? std::getenv("TESSERA_TEST_FAIL_HOW") : "";
  const std::string others =
      std::getenv("TESSERA_TEST_OTHERS") ? std::getenv("TESSERA_TEST_OTHERS") : "leave";

  LaunchInfo info = detect_launch();
  ASSERT_EQ(info.source, "tessera-cli");
  std::ofstream out(str(dir, "/rank", info.rank, ".txt"));
  try {
    auto bootstrap = bootstrap_from_launch(info);
    uint64_t mine = (uint64_t(info.rank) << 32) | 0xabcd;
    std::vector<uint64_t> all(info.size);
    bootstrap->allgather(&mine, all.data(), sizeof(mine));
    for (int r = 0; r < info.size; ++r) ASSERT_EQ(all[r], (uint64_t(r) << 32) | 0xabcd);
    auto pids = bootstrap->allgather_strings(std::to_string(::getpid()));
    ASSERT_EQ(pids[info.rank], std::to_string(::getpid()));
    for (int r = 0; r < info.size; ++r) {
      if (r != info.rank) EXPECT_NE(pids[r], pids[info.rank]);  // really separate processes
    }

    if (info.rank == fail_rank) {
      out << "failing: " << fail_how << std::endl;
      if (fail_how == "kill") ::raise(SIGKILL);
      bootstrap.reset();
      std::_Exit(3);
    }
    if (fail_rank >= 0 && others == "hang") {
      std::this_thread::sleep_for(std::chrono::seconds(60));
    } else if (fail_rank < 0 || others == "barrier") {
      bootstrap->barrier();
    }
    out << "ok" << std::endl;
  } catch (const Error& e) {
    out << "error: " << error_code_name(e.code()) << ": " << e.what() << std::endl;
    if (fail_rank >= 0) std::_Exit(4);  // expected: a peer failed on purpose
    throw;
  }
}

// A fresh directory for the workers' reports.
class WorkerDir {
 public:
  WorkerDir() {
    char pattern[] = "/tmp/tessera_bootstrap_test_XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~WorkerDir() { std::system(str("rm -rf '", path_, "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string report(int rank) const {
    std::ifstream in(str(path_, "/rank", rank, ".txt"));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string path_;
};

int launch_workers(int num_workers, const std::vector<std::pair<std::string, std::string>>& env) {
  std::string program = "tessera_unit_tests";
  std::string filter = "--gtest_filter=BootstrapWorker.*";
  std::string brief = "--gtest_brief=1";
  char* argv[] = {program.data(), filter.data(), brief.data(), nullptr};
  return launch_local_workers(num_workers, 3, argv, env);
}

TEST(BootstrapLauncher, WorkersThatSucceedReturnZero) {
  ScopedLaunchEnv clean;
  ScopedWaitTimeout timeout(10000);
  WorkerDir dir;
  int status =
      launch_workers(3, {{"TESSERA_TEST_WORKER_DIR", dir.path()}, {"TESSERA_TIMEOUT_MS", "10000"}});
  EXPECT_EQ(status, 0);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(dir.report(r), "ok\n") << "rank " << r;
  EXPECT_FALSE(launched_as_worker());  // the launcher's own environment is untouched
}

TEST(BootstrapLauncher, NonZeroExitPropagates) {
  ScopedLaunchEnv clean;
  ScopedWaitTimeout timeout(10000);
  WorkerDir dir;
  int status = launch_workers(2, {{"TESSERA_TEST_WORKER_DIR", dir.path()},
                                  {"TESSERA_TIMEOUT_MS", "10000"},
                                  {"TESSERA_TEST_FAIL_RANK", "1"},
                                  {"TESSERA_TEST_FAIL_HOW", "exit3"}});
  EXPECT_EQ(status, 3);
  EXPECT_EQ(dir.report(0), "ok\n");
  EXPECT_EQ(dir.report(1), "failing: exit3\n");
}

TEST(BootstrapLauncher, KilledWorkerStopsTheHungOthers) {
  ScopedLaunchEnv clean;
  ScopedWaitTimeout timeout(1500);  // the launcher's wait before SIGTERM
  WorkerDir dir;
  auto start = Clock::now();
  int status = launch_workers(3, {{"TESSERA_TEST_WORKER_DIR", dir.path()},
                                  {"TESSERA_TIMEOUT_MS", "1500"},
                                  {"TESSERA_TEST_FAIL_RANK", "2"},
                                  {"TESSERA_TEST_FAIL_HOW", "kill"},
                                  {"TESSERA_TEST_OTHERS", "hang"}});
  EXPECT_EQ(status, 128 + SIGKILL);
  // SIGTERM after the 1.5 s wait timeout, not after the workers' 60 s sleep.
  EXPECT_LT(ms_since(start), 8000);
}

TEST(BootstrapLauncher, LostWorkerIsPeerFailureForTheOthers) {
  ScopedLaunchEnv clean;
  ScopedWaitTimeout timeout(10000);
  WorkerDir dir;
  auto start = Clock::now();
  int status = launch_workers(2, {{"TESSERA_TEST_WORKER_DIR", dir.path()},
                                  {"TESSERA_TIMEOUT_MS", "20000"},
                                  {"TESSERA_TEST_FAIL_RANK", "1"},
                                  {"TESSERA_TEST_FAIL_HOW", "kill"},
                                  {"TESSERA_TEST_OTHERS", "barrier"}});
  EXPECT_NE(status, 0);
  std::string report = dir.report(0);
  EXPECT_TRUE(contains(report, "error: peer failure")) << report;
  EXPECT_TRUE(contains(report, "rank 1 (pid")) << report;
  EXPECT_TRUE(contains(report, "lost its connection")) << report;
  EXPECT_LT(ms_since(start), 8000);  // told by the hub, not by the 20 s timeout
}

TEST(BootstrapLauncher, ValidatesArguments) {
  char program[] = "x";
  char* argv[] = {program, nullptr};
  EXPECT_THROW(launch_local_workers(0, 1, argv), Error);
  EXPECT_THROW(launch_local_workers(1, 0, argv), Error);
  EXPECT_THROW(launch_local_workers(1, 1, argv, {{"A=B", "c"}}), Error);
}

}  // namespace
}  // namespace tessera
