// The cpu symmetric heap: symmetric offsets, put/get, put_with_signal + wait_signal (the
// data is visible once the signal is), signal add, barrier, peer_ptr and transports across
// emulated machines, pacing, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "comm/cpu/cpu_symmetric_heap.h"
#include "dist/cpu_dist_util.h"
#include "tessera/comm/context.h"
#include "tessera/comm/emulation.h"

namespace tessera {
namespace {

using testing::all_layouts;
using testing::encode;
using testing::expect_error;
using testing::Layout;
using testing::layout_name;
using testing::test_options;

TEST(CpuHeap, AllocateGivesSameOffsetsOnEveryRank) {
  run_cpu_ranks(4, 2, test_options(), [](RankContext& ctx) {
    ASSERT_NE(ctx.heap, nullptr);
    EXPECT_EQ(ctx.heap->backend(), Backend::kCpu);
    SymmetricBuffer a = ctx.heap->allocate(100);
    SymmetricBuffer b = ctx.heap->allocate(1000);
    SymmetricBuffer c = ctx.heap->allocate(0);
    std::vector<uint64_t> mine{a.offset, b.offset, c.offset}, all(3 * 4);
    ctx.world->all_gather(TensorView(mine.data(), DType::kU64, Device::cpu(), {3}),
                          TensorView(all.data(), DType::kU64, Device::cpu(), {12}), ctx.stream);
    for (int r = 0; r < 4; ++r) {
      for (int k = 0; k < 3; ++k) EXPECT_EQ(all[r * 3 + k], mine[k]);
    }
    EXPECT_EQ(a.bytes, 100u);
    EXPECT_GE(b.offset, a.offset + a.bytes);
    EXPECT_EQ(b.offset % 256, 0u);
  });
}

TEST(CpuHeap, PutWithSignalRingDeliversDataBeforeSignal) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(), [&](RankContext& ctx) {
      const int n = ctx.size;
      const int64_t count = 257;
      SymmetricBuffer inbox = ctx.heap->allocate(count * sizeof(uint64_t) * n);
      std::vector<uint64_t> mine(count);
      // Several rounds through the same slots: the signal counts rounds.
      int wrong = 0;
      for (int round = 1; round <= 3; ++round) {
        for (int64_t i = 0; i < count; ++i) mine[i] = encode(ctx.rank, i * 10 + round);
        for (int peer = 0; peer < n; ++peer) {
          ctx.heap->put_with_signal(inbox, ctx.rank * count * sizeof(uint64_t), mine.data(),
                                    count * sizeof(uint64_t), peer, /*signal_slot=*/ctx.rank,
                                    SignalOp::kSet, round, ctx.stream);
        }
        const auto* got = static_cast<const uint64_t*>(inbox.local);
        for (int src = 0; src < n; ++src) {
          ctx.heap->wait_signal(src, WaitCmp::kGe, round, src, ctx.stream);
          for (int64_t i = 0; i < count; ++i) {
            wrong += got[src * count + i] != encode(src, i * 10 + round);
          }
        }
        // Nobody overwrites an inbox before its owner read it.
        ctx.heap->barrier(ctx.stream);
      }
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
  }
}

TEST(CpuHeap, GetReadsPeerCopyAndSignalAddCounts) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(), [&](RankContext& ctx) {
      const int n = ctx.size;
      SymmetricBuffer buf = ctx.heap->allocate(64 * sizeof(uint64_t));
      auto* local = static_cast<uint64_t*>(buf.local);
      for (int i = 0; i < 64; ++i) local[i] = encode(ctx.rank, i);
      ctx.heap->barrier(ctx.stream);
      std::vector<uint64_t> got(16);
      int wrong = 0;
      for (int peer = 0; peer < n; ++peer) {
        // Elements 8..23 of the peer's copy.
        ctx.heap->get(got.data(), buf, 8 * sizeof(uint64_t), 16 * sizeof(uint64_t), peer,
                      ctx.stream);
        for (int i = 0; i < 16; ++i) wrong += got[i] != encode(peer, 8 + i);
        // Every rank adds 1 to every rank's slot 7: each ends at n.
        ctx.heap->signal(peer, 7, SignalOp::kAdd, 1, ctx.stream);
      }
      ctx.heap->wait_signal(7, WaitCmp::kEq, uint64_t(n), -1, ctx.stream);
      EXPECT_EQ(ctx.heap->read_signal(7), uint64_t(n));
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
      ctx.heap->barrier(ctx.stream);
      ctx.heap->check_errors();
    });
  }
}

TEST(CpuHeap, PeerPointersAndTransportsFollowEmulatedMachines) {
  run_cpu_ranks(4, 2, test_options(), [](RankContext& ctx) {
    SymmetricBuffer buf = ctx.heap->allocate(sizeof(int64_t));
    *static_cast<int64_t*>(buf.local) = 1000 + ctx.rank;
    ctx.heap->barrier(ctx.stream);
    for (int peer = 0; peer < 4; ++peer) {
      const bool same_machine =
          ctx.topology.machine_of_rank[peer] == ctx.topology.machine_of_rank[ctx.rank];
      EXPECT_EQ(ctx.heap->transport(peer), same_machine ? "cpu" : "cpu+paced");
      void* p = ctx.heap->peer_ptr(buf, peer);
      if (same_machine) {
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(*static_cast<int64_t*>(p), 1000 + peer);
      } else {
        EXPECT_EQ(p, nullptr);  // real machines cannot load/store each other's memory
      }
    }
    EXPECT_EQ(ctx.heap->peer_ptr(buf, ctx.rank), buf.local);
    ctx.heap->barrier(ctx.stream);
  });
}

TEST(CpuHeap, CrossMachinePutsArePacedToTheLink) {
  ContextOptions options = test_options();
  options.emulated_link = LinkSpec{0.1, 2000.0, "custom"};  // 2 ms + 10 us per KB
  run_cpu_ranks(2, 2, options, [](RankContext& ctx) {
    SymmetricBuffer buf = ctx.heap->allocate(1000);
    std::vector<char> data(1000, char(ctx.rank));
    const auto start = std::chrono::steady_clock::now();
    ctx.heap->put(buf, 0, data.data(), 1000, 1 - ctx.rank, ctx.stream);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(us, paced_transfer_us(ctx.topology.cross_link, 1000));
    ctx.heap->barrier(ctx.stream);
    EXPECT_EQ(static_cast<char*>(buf.local)[999], char(1 - ctx.rank));
  });
}

// One emulated NIC per rank, each way: a transfer starts when its source's egress and its
// destination's ingress are both free. Checked on the reservations themselves, with times the
// test gives, so a loaded machine cannot change the answer.
TEST(CpuHeapShared, EmulatedNicsSerializeSharedEndsOnly) {
  Topology topology = cpu_topology(4, 4);
  topology.cross_link = LinkSpec{0.5, 3.0, "custom"};  // 0.5 GB/s, 3 us
  cpu::CpuHeapShared shared(topology, 4096, std::make_shared<cpu::FailureState>(4));
  constexpr size_t kBytes = 1000000;
  using Clock = cpu::CpuWorld::Clock;
  const auto us = [](double v) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::micro>(v));
  };
  const auto latency = us(paced_transfer_us(topology.cross_link, 0));
  const auto busy = us(paced_transfer_us(topology.cross_link, kBytes)) - latency;
  const Clock::time_point t0{};
  // Two pushes into rank 0 at once: the second waits for the first on rank 0's ingress.
  EXPECT_EQ(shared.reserve_link(1, 0, kBytes, t0), t0 + busy + latency);
  EXPECT_EQ(shared.reserve_link(2, 0, kBytes, t0), t0 + 2 * busy + latency);
  // Disjoint pairs at a later time: neither waits for the other, nor for the past.
  const Clock::time_point t1 = t0 + 10 * busy;
  EXPECT_EQ(shared.reserve_link(1, 2, kBytes, t1), t1 + busy + latency);
  EXPECT_EQ(shared.reserve_link(3, 0, kBytes, t1), t1 + busy + latency);
  // Rank 1's egress is busy until t1 + busy: its next push, to an idle rank, starts then.
  EXPECT_EQ(shared.reserve_link(1, 3, kBytes, t1), t1 + 2 * busy + latency);
  // No bytes: latency only, nothing reserved.
  EXPECT_EQ(shared.reserve_link(2, 0, 0, t1), t1 + latency);
}

// The same NICs pace real pushes: each push takes at least the link's time, and two into one
// rank take at least twice that from the first start (the threads start apart on few cores).
// Wall-clock lower bounds only: a loaded machine can only make a push look slower.
TEST(CpuHeap, EmulatedNicsPaceConcurrentPushes) {
  ContextOptions options = test_options();
  constexpr size_t kBytes = 10000000;  // 20 ms a push
  options.emulated_link = LinkSpec{0.5, 0.0, "custom"};  // 0.5 GB/s
  options.heap_bytes = 32 << 20;
  const double one_us = paced_transfer_us(options.emulated_link, kBytes);
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  std::vector<Clock::time_point> began(4), ended(4);
  run_cpu_ranks(4, 4, options, [&](RankContext& ctx) {
    SymmetricBuffer buf = ctx.heap->allocate(2 * kBytes);
    std::vector<char> data(kBytes, char(ctx.rank));
    ctx.heap->barrier(ctx.stream);
    if (ctx.rank == 1 || ctx.rank == 2) {
      began[size_t(ctx.rank)] = Clock::now();
      ctx.heap->put(buf, size_t(ctx.rank - 1) * kBytes, data.data(), kBytes, 0, ctx.stream);
      ended[size_t(ctx.rank)] = Clock::now();
    }
    ctx.heap->barrier(ctx.stream);
  });
  for (int r : {1, 2})
    EXPECT_GE(us(ended[size_t(r)] - began[size_t(r)]), 0.99 * one_us)
        << "rank " << r << ": a push takes the link's time";
  const double span = us(std::max(ended[1], ended[2]) - std::min(began[1], began[2]));
  EXPECT_GE(span, 2.0 * one_us) << "two pushes into one NIC must share its bandwidth";
}

TEST(CpuHeap, ArgumentErrorsNameTheProblem) {
  ContextOptions options = test_options();
  options.heap_bytes = 4096;
  run_cpu_ranks(2, 1, options, [](RankContext& ctx) {
    SymmetricBuffer buf = ctx.heap->allocate(128);
    std::vector<char> src(256);
    expect_error([&] { ctx.heap->put(buf, 100, src.data(), 64, 1, ctx.stream); },
                 ErrorCode::kInvalidArgument,
                 {"put to/from peer 1", "offset 100", "bytes 64", "128 bytes"});
    expect_error([&] { ctx.heap->get(src.data(), buf, 0, 8, 2, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"get: peer = 2", "expected 0..1"});
    expect_error(
        [&] { ctx.heap->signal(0, ctx.heap->num_signal_slots(), SignalOp::kSet, 1, ctx.stream); },
        ErrorCode::kInvalidArgument, {"signal: signal_slot = "});
    expect_error([&] { ctx.heap->wait_signal(-1, WaitCmp::kEq, 0, 0, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"wait_signal: signal_slot = -1"});
    SymmetricBuffer foreign{src.data(), 0, 16};
    expect_error([&] { ctx.heap->put(foreign, 0, src.data(), 8, 0, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"not allocated from this rank's heap"});
    // Both ranks ask for more than is left: both get the same error.
    expect_error([&] { ctx.heap->allocate(8192); }, ErrorCode::kInvalidArgument,
                 {"heap.allocate(8192 bytes)", "4096 bytes has", "heap_bytes"});
    // Ranks that ask for different sizes: every rank reports it.
    expect_error([&] { ctx.heap->allocate(ctx.rank == 0 ? 64 : 32); }, ErrorCode::kInvalidArgument,
                 {"rank 0 allocates 64 bytes but rank 1 allocates 32"});
    ctx.heap->barrier(ctx.stream);
  });
}

}  // namespace
}  // namespace tessera
