// The bootstrap of ranks that are threads of one process (the loopback ranks' channel): its
// allgather and what is built on it, bounded waits that name the rank that never arrived, and a
// rank that fails stopping the others.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "comm/cpu/rank_threads.h"
#include "comm/cpu/thread_bootstrap.h"
#include "dist/cpu_dist_util.h"

namespace tessera::cpu {
namespace {

using testing::expect_error;
using testing::ScopedWaitTimeout;

// Runs body(bootstrap) on `p` rank threads sharing one world.
void run_bootstraps(int p, const std::function<void(ThreadBootstrap&)>& body) {
  auto failure = std::make_shared<FailureState>(p);
  std::vector<int> ranks(static_cast<size_t>(p));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto world = std::make_shared<CpuWorld>("bootstrap", ranks, failure);
  run_rank_threads(p, failure, [&](int r) {
    ThreadBootstrap bootstrap(world, r);
    body(bootstrap);
  });
}

TEST(ThreadBootstrap, AllgatherBroadcastAndStrings) {
  std::atomic<int> done{0};
  run_bootstraps(4, [&](ThreadBootstrap& b) {
    EXPECT_STREQ(b.kind(), "thread");
    EXPECT_EQ(b.size(), 4);
    EXPECT_EQ(b.local_size(), 4);
    EXPECT_EQ(b.local_rank(), b.rank());
    const uint64_t mine[2] = {uint64_t(b.rank()) * 10 + 1, ~uint64_t(b.rank())};
    std::vector<uint64_t> all(8, 0);
    b.allgather(mine, all.data(), sizeof(mine));
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(all[size_t(2 * r)], uint64_t(r) * 10 + 1);
      EXPECT_EQ(all[size_t(2 * r + 1)], ~uint64_t(r));
    }
    int value = b.rank() == 2 ? 77 : -1;
    b.broadcast(&value, sizeof(value), 2);
    EXPECT_EQ(value, 77);
    b.barrier();
    const std::vector<std::string> names = b.allgather_strings(std::string(size_t(b.rank()), 'x'));
    ASSERT_EQ(names.size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(names[size_t(r)], std::string(size_t(r), 'x'));
    b.allgather(nullptr, nullptr, 0);  // nothing to move is not an error
    ++done;
  });
  EXPECT_EQ(done.load(), 4);
}

TEST(ThreadBootstrap, RankThatNeverArrivesTimesOutNamingIt) {
  ScopedWaitTimeout timeout(300);
  expect_error(
      [&] {
        run_bootstraps(3, [&](ThreadBootstrap& b) {
          if (b.rank() == 1) return;  // never joins the allgather
          uint64_t word = 1, all[3];
          b.allgather(&word, all, sizeof(word));
        });
      },
      ErrorCode::kTimeout, {"rank 1 that never arrived"});
}

TEST(ThreadBootstrap, RankThatFailsStopsTheOthers) {
  ScopedWaitTimeout timeout(60000);  // must not be waited out
  expect_error(
      [&] {
        run_bootstraps(3, [&](ThreadBootstrap& b) {
          if (b.rank() == 2) throw_error(ErrorCode::kInvalidArgument, "rank 2 gave up");
          uint64_t word = 1, all[3];
          b.allgather(&word, all, sizeof(word));
        });
      },
      ErrorCode::kInvalidArgument,
      {"rank 2 gave up", "rank 0: peer failure: ", "rank 1: peer failure: "});
}

TEST(ThreadBootstrap, NullBuffersAreRefused) {
  expect_error(
      [&] {
        run_bootstraps(1, [&](ThreadBootstrap& b) {
          uint64_t word = 0;
          b.allgather(&word, nullptr, sizeof(word));
        });
      },
      ErrorCode::kInvalidArgument, {"recv = ", "expected buffers of `bytes` bytes"});
}

}  // namespace
}  // namespace tessera::cpu
