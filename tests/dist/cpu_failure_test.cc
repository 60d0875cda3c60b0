// No hangs on the cpu backend: a rank that skips a collective, a recv nobody answers, a
// signal never sent (from one rank, or from one of several), a rank that throws, ranks that call
// different collectives, and bad arguments passed on every rank. Each must end within the
// (shortened) wait timeout with an error that names who waited for whom.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "dist/cpu_dist_util.h"
#include "tessera/comm/context.h"

namespace tessera {
namespace {

using testing::expect_error;
using testing::ScopedWaitTimeout;
using testing::test_options;
using Clock = std::chrono::steady_clock;

constexpr int64_t kTimeoutMs = 300;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

TEST(CpuFailure, SkippedCollectiveTimesOutNamingTheAbsentRank) {
  ScopedWaitTimeout timeout(kTimeoutMs);
  std::atomic<int> timed_out{0};
  run_cpu_ranks(4, 2, test_options(false), [&](RankContext& ctx) {
    std::vector<float> send(2, 1.0f), recv(8);
    // One collective that everybody joins, then rank 2 skips the next one.
    ctx.world->barrier(ctx.stream);
    if (ctx.rank == 2) return;
    const auto start = Clock::now();
    try {
      ctx.world->all_gather(TensorView(send.data(), DType::kF32, Device::cpu(), {2}),
                            TensorView(recv.data(), DType::kF32, Device::cpu(), {8}), ctx.stream);
      ADD_FAILURE() << "rank " << ctx.rank << ": all_gather returned without rank 2";
    } catch (const Error& e) {
      const double waited = ms_since(start);
      EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
      const std::string msg = e.what();
      EXPECT_NE(msg.find("all_gather #2 on group 'world'"), std::string::npos) << msg;
      // Normally "for rank 2 that never arrived"; a rank that woke after another gave up
      // names the same wait through that rank's message.
      EXPECT_NE(msg.find("rank 2 that never arrived"), std::string::npos) << msg;
      // A rank that started later than the first to give up stops with it, a little earlier.
      EXPECT_GE(waited, kTimeoutMs / 2);
      EXPECT_LT(waited, kTimeoutMs + 3000);
      ++timed_out;
    }
  });
  EXPECT_EQ(timed_out.load(), 3);
}

TEST(CpuFailure, LateRankDoesNotReadAbandonedBuffers) {
  ScopedWaitTimeout timeout(kTimeoutMs);
  run_cpu_ranks(3, 1, test_options(false), [&](RankContext& ctx) {
    std::vector<int32_t> send(4, ctx.rank), recv(12);
    auto call = [&] {
      ctx.world->all_gather(TensorView(send.data(), DType::kI32, Device::cpu(), {4}),
                            TensorView(recv.data(), DType::kI32, Device::cpu(), {12}), ctx.stream);
    };
    if (ctx.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2 * kTimeoutMs));
      expect_error(call, ErrorCode::kTimeout, {"arrived at all_gather #1", "gave up"});
    } else {
      expect_error(call, ErrorCode::kTimeout, {"for rank 1 that never arrived"});
    }
  });
}

TEST(CpuFailure, UnansweredRecvAndSignalTimeOut) {
  ScopedWaitTimeout timeout(kTimeoutMs);
  run_cpu_ranks(2, 2, test_options(), [&](RankContext& ctx) {
    if (ctx.rank == 0) {
      std::vector<float> v(4);
      const auto start = Clock::now();
      expect_error(
          [&] {
            ctx.world->recv(TensorView(v.data(), DType::kF32, Device::cpu(), {4}), 1, ctx.stream);
          },
          ErrorCode::kTimeout, {"rank 0 waited", "recv #1 from rank 1", "rank 1 never sent it"});
      EXPECT_LT(ms_since(start), kTimeoutMs + 3000);
      expect_error([&] { ctx.heap->wait_signal(5, WaitCmp::kGe, 1, 1, ctx.stream); },
                   ErrorCode::kTimeout,
                   {"rank 0 waited", "wait_signal(slot 5 >= 1) for rank 1", "the slot holds 0"});
    }
  });
}

// A wait any rank may satisfy (a signal barrier: each member adds 1) cannot tell from the
// slot's value who is missing; the timeout names the ranks that raised the slot fewest times.
TEST(CpuFailure, SignalWaitForAnyRankNamesTheRanksBehind) {
  ScopedWaitTimeout timeout(kTimeoutMs);
  run_cpu_ranks(4, 2, test_options(), [&](RankContext& ctx) {
    if (ctx.rank == 1 || ctx.rank == 3) ctx.heap->signal(0, 7, SignalOp::kAdd, 1, ctx.stream);
    if (ctx.rank != 0) return;
    expect_error(
        [&] { ctx.heap->wait_signal(7, WaitCmp::kGe, 3, -1, ctx.stream); }, ErrorCode::kTimeout,
        {"wait_signal(slot 7 >= 3) for any rank: the slot holds 2",
         "raises of the slot so far (rank 1: 1, rank 2: 0, rank 3: 1): waiting for rank 2"});
  });
}

TEST(CpuFailure, HeapBarrierTimesOutNamingTheAbsentRank) {
  ScopedWaitTimeout timeout(kTimeoutMs);
  run_cpu_ranks(3, 3, test_options(), [&](RankContext& ctx) {
    if (ctx.rank == 0) return;
    expect_error([&] { ctx.heap->barrier(ctx.stream); }, ErrorCode::kTimeout,
                 {"heap.barrier #1", "for rank 0 that never arrived"});
  });
}

TEST(CpuFailure, ThrowingRankStopsWaitersEarlyWithPeerFailure) {
  // A long timeout: the waiters must stop because rank 1 failed, not because time ran out.
  ScopedWaitTimeout timeout(20000);
  std::atomic<int> peer_failures{0};
  const auto start = Clock::now();
  try {
    run_cpu_ranks(4, 1, test_options(), [&](RankContext& ctx) {
      if (ctx.rank == 1) {
        throw Error(ErrorCode::kInvalidArgument, "boom: rank 1 could not plan");
      }
      std::vector<float> send(1), recv(4);
      try {
        if (ctx.rank == 3) {
          ctx.heap->wait_signal(0, WaitCmp::kEq, 1, 1, ctx.stream);
        } else {
          ctx.world->all_gather(TensorView(send.data(), DType::kF32, Device::cpu(), {1}),
                                TensorView(recv.data(), DType::kF32, Device::cpu(), {4}),
                                ctx.stream);
        }
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank 1 failed"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
        ++peer_failures;
        throw;
      }
    });
    ADD_FAILURE() << "run_cpu_ranks did not rethrow";
  } catch (const Error& e) {
    // The root cause (rank 1's error, with its code) wins over the ranks that only saw it.
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1: boom"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0: peer failure"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 3: peer failure"), std::string::npos) << msg;
  }
  EXPECT_EQ(peer_failures.load(), 3);
  EXPECT_LT(ms_since(start), 5000);
}

TEST(CpuFailure, LowestRankErrorIsRethrownWithTheOthersAppended) {
  try {
    run_cpu_ranks(3, 1, test_options(false), [](RankContext& ctx) {
      if (ctx.rank > 0) throw Error(ErrorCode::kUnsupported, str("no luck on rank ", ctx.rank));
    });
    ADD_FAILURE() << "run_cpu_ranks did not rethrow";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1: no luck on rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 2: unsupported: no luck on rank 2"), std::string::npos) << msg;
  }
}

TEST(CpuFailure, DifferentCollectivesFailOnEveryRank) {
  std::atomic<int> failures{0};
  run_cpu_ranks(3, 1, test_options(false), [&](RankContext& ctx) {
    std::vector<float> send(1), recv(3);
    try {
      if (ctx.rank == 1) {
        ctx.world->barrier(ctx.stream);
      } else {
        ctx.world->all_gather(TensorView(send.data(), DType::kF32, Device::cpu(), {1}),
                              TensorView(recv.data(), DType::kF32, Device::cpu(), {3}), ctx.stream);
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("rank 1: barrier"), std::string::npos) << e.what();
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 3);
}

TEST(CpuFailure, BadArgumentsFailOnEveryRank) {
  ScopedWaitTimeout timeout(5000);
  std::atomic<int> checked{0};
  run_cpu_ranks(6, 3, test_options(false), [&](RankContext& ctx) {
    std::vector<float> f(64);
    std::vector<uint16_t> h(64);
    auto F = [&](int64_t n) { return TensorView(f.data(), DType::kF32, Device::cpu(), {n}); };
    // recv too small.
    expect_error([&] { ctx.world->all_gather(F(4), F(20), ctx.stream); },
                 ErrorCode::kInvalidArgument,
                 {"all_gather recv", "holds 80 bytes: expected at least 96"});
    // send not divisible into one block per rank.
    expect_error([&] { ctx.world->all_to_all(F(8), F(8), ctx.stream); },
                 ErrorCode::kInvalidArgument,
                 {"all_to_all send", "8 elements: expected a multiple of the group size 6"});
    expect_error([&] { ctx.world->reduce_scatter(F(9), F(1), ReduceOp::kSum, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"expected a multiple of the group size 6"});
    // send and recv of different dtypes.
    expect_error(
        [&] {
          ctx.world->all_reduce(F(4), TensorView(h.data(), DType::kBF16, Device::cpu(), {4}),
                                ReduceOp::kSum, ctx.stream);
        },
        ErrorCode::kInvalidArgument, {"all_reduce(sum) recv has dtype bf16: expected f32"});
    // u8 cannot be reduced.
    std::vector<uint8_t> b(6);
    expect_error(
        [&] {
          ctx.world->all_reduce(TensorView(b.data(), DType::kU8, Device::cpu(), {6}),
                                TensorView(b.data(), DType::kU8, Device::cpu(), {6}),
                                ReduceOp::kMax, ctx.stream);
        },
        ErrorCode::kUnsupported, {"dtype u8"});
    // A group size that does not divide the ranks.
    expect_error([&] { contiguous_groups(ctx.size, 4, "--ring"); }, ErrorCode::kInvalidArgument,
                 {"--ring = 4", "world_size = 6"});
    // Ranks that disagree on the dtype: caught at the rendezvous, reported by every rank.
    DType dt = ctx.rank == 3 ? DType::kI32 : DType::kF32;
    expect_error(
        [&] {
          ctx.world->all_gather(TensorView(f.data(), dt, Device::cpu(), {2}),
                                TensorView(f.data() + 2, dt, Device::cpu(), {12}), ctx.stream);
        },
        ErrorCode::kInvalidArgument,
        {"all_gather #1", "rank 0 passes 2 f32 elements but rank 3 passes 2 i32"});
    ctx.world->barrier(ctx.stream);
    ++checked;
  });
  EXPECT_EQ(checked.load(), 6);
}

}  // namespace
}  // namespace tessera
