// Pitched (2-D) one-sided transfers of the cpu symmetric heap: put_2d / get_2d move exactly the
// rows they name (and nothing between them) to peers in the same and in other emulated
// machines; across machines a transfer of many rows is paced once (one latency), not once per
// row; argument errors name the argument. Also the grouping of a strided region's runs into
// pitched transfers that the sequence-parallel executor issues (Geometry::for_each_pitched).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <tuple>
#include <vector>

#include "../../src/sp/executor_copy.h"
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

constexpr uint64_t kUntouched = ~uint64_t(0);

// Each rank owns a block of kRows rows in every rank's buffer: row r of rank q's block sits at
// element (q * kRows + r) * kPitch + kLead; the elements between rows stay untouched.
constexpr size_t kRows = 7;
constexpr size_t kRowElems = 3;
constexpr size_t kPitch = 5;  // elements
constexpr size_t kLead = 1;

TEST(CpuHeap2d, PutAndGetMoveExactlyTheRows) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(), [&](RankContext& ctx) {
      const int n = ctx.size;
      const size_t elems = size_t(n) * kRows * kPitch + kLead;
      SymmetricBuffer buf = ctx.heap->allocate(elems * sizeof(uint64_t));
      auto* local = static_cast<uint64_t*>(buf.local);
      for (size_t i = 0; i < elems; ++i) local[i] = kUntouched;
      ctx.heap->barrier(ctx.stream);

      // put_2d: packed local rows into this rank's block at every peer.
      std::vector<uint64_t> rows(kRows * kRowElems);
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = encode(ctx.rank, int64_t(i));
      const size_t block = size_t(ctx.rank) * kRows * kPitch + kLead;
      for (int peer = 0; peer < n; ++peer) {
        ctx.heap->put_2d(buf, block * 8, kPitch * 8, rows.data(), kRowElems * 8, kRowElems * 8,
                         kRows, peer, ctx.stream);
      }
      ctx.heap->barrier(ctx.stream);
      int wrong = 0;
      for (size_t i = 0; i < elems; ++i) {
        uint64_t expected = kUntouched;
        if (i >= kLead) {
          const size_t q = (i - kLead) / (kRows * kPitch);
          const size_t r = (i - kLead) / kPitch % kRows;
          const size_t c = (i - kLead) % kPitch;
          if (c < kRowElems) expected = encode(int(q), int64_t(r * kRowElems + c));
        }
        wrong += local[i] != expected;
      }
      EXPECT_EQ(wrong, 0) << "put_2d, rank " << ctx.rank;

      // get_2d: each peer's own block, into a local buffer pitched 4 elements (gaps untouched).
      constexpr size_t kLocalPitch = 4;
      std::vector<uint64_t> got(kRows * kLocalPitch);
      wrong = 0;
      for (int peer = 0; peer < n; ++peer) {
        std::fill(got.begin(), got.end(), kUntouched);
        const size_t peer_block = size_t(peer) * kRows * kPitch + kLead;
        ctx.heap->get_2d(got.data(), kLocalPitch * 8, buf, peer_block * 8, kPitch * 8,
                         kRowElems * 8, kRows, peer, ctx.stream);
        for (size_t r = 0; r < kRows; ++r) {
          for (size_t c = 0; c < kLocalPitch; ++c) {
            const uint64_t expected =
                c < kRowElems ? encode(peer, int64_t(r * kRowElems + c)) : kUntouched;
            wrong += got[r * kLocalPitch + c] != expected;
          }
        }
      }
      EXPECT_EQ(wrong, 0) << "get_2d, rank " << ctx.rank;
      ctx.heap->barrier(ctx.stream);
    });
  }
}

TEST(CpuHeap2d, CrossMachineTransfersArePacedOnce) {
  ContextOptions options = test_options();
  constexpr double kLatencyUs = 2000.0;
  options.emulated_link = LinkSpec{1.0, kLatencyUs, "custom"};  // 2 ms + 1 us per KB
  run_cpu_ranks(2, 2, options, [&](RankContext& ctx) {
    constexpr size_t kRowBytes = 64, kNumRows = 50, kRowPitch = 256;
    SymmetricBuffer buf = ctx.heap->allocate(kRowPitch * kNumRows);
    std::vector<unsigned char> data(kRowBytes * kNumRows, static_cast<unsigned char>(ctx.rank));
    const int peer = 1 - ctx.rank;
    ASSERT_EQ(ctx.heap->peer_ptr(buf, peer), nullptr);
    const double expected_us = paced_transfer_us(ctx.topology.cross_link, kRowBytes * kNumRows);
    auto elapsed_us = [](std::chrono::steady_clock::time_point start) {
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
          .count();
    };
    auto start = std::chrono::steady_clock::now();
    ctx.heap->put_2d(buf, 0, kRowPitch, data.data(), kRowBytes, kRowBytes, kNumRows, peer,
                     ctx.stream);
    double us = elapsed_us(start);
    EXPECT_GE(us, expected_us);
    EXPECT_LT(us, 10 * kLatencyUs) << "put_2d of " << kNumRows << " rows paid a latency per row";
    ctx.heap->barrier(ctx.stream);
    EXPECT_EQ(static_cast<unsigned char*>(buf.local)[(kNumRows - 1) * kRowPitch], peer);

    start = std::chrono::steady_clock::now();
    ctx.heap->get_2d(data.data(), kRowBytes, buf, 0, kRowPitch, kRowBytes, kNumRows, peer,
                     ctx.stream);
    us = elapsed_us(start);
    EXPECT_GE(us, expected_us);
    EXPECT_LT(us, 10 * kLatencyUs) << "get_2d of " << kNumRows << " rows paid a latency per row";
    EXPECT_EQ(data.back(), ctx.rank);  // the peer's copy holds what this rank put
    ctx.heap->barrier(ctx.stream);
  });
}

TEST(CpuHeap2d, ArgumentErrorsNameTheArgument) {
  ContextOptions options = test_options();
  options.heap_bytes = 4096;
  run_cpu_ranks(2, 1, options, [](RankContext& ctx) {
    SymmetricBuffer buf = ctx.heap->allocate(256);
    std::vector<char> local(1024);
    // 3 rows at pitch 100 + 60 bytes = 260 > 256.
    expect_error(
        [&] { ctx.heap->put_2d(buf, 0, 100, local.data(), 60, 60, 3, 1, ctx.stream); },
        ErrorCode::kInvalidArgument,
        {"put_2d to/from peer 1", "span 260", "dst_pitch 100", "row_bytes 60", "256 bytes"});
    expect_error([&] { ctx.heap->get_2d(local.data(), 60, buf, 16, 100, 60, 3, 1, ctx.stream); },
                 ErrorCode::kInvalidArgument,
                 {"get_2d to/from peer 1", "offset 16", "src_pitch 100"});
    expect_error([&] { ctx.heap->put_2d(buf, 0, 32, local.data(), 64, 64, 2, 0, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"put_2d", "dst_pitch = 32", "row_bytes = 64"});
    expect_error([&] { ctx.heap->get_2d(local.data(), 8, buf, 0, 64, 16, 2, 0, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"get_2d", "dst_pitch = 8", "row_bytes = 16"});
    expect_error([&] { ctx.heap->put_2d(buf, 0, 64, nullptr, 16, 16, 2, 1, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"put_2d", "src is null"});
    expect_error([&] { ctx.heap->get_2d(local.data(), 16, buf, 0, 64, 16, 2, 2, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"get_2d: peer = 2", "expected 0..1"});
    // Rows so many that the span overflows.
    expect_error(
        [&] { ctx.heap->put_2d(buf, 0, 1 << 20, local.data(), 16, 16, ~size_t(0), 1, ctx.stream); },
        ErrorCode::kInvalidArgument, {"put_2d", "overflow"});
    SymmetricBuffer foreign{local.data(), 0, 64};
    expect_error([&] { ctx.heap->put_2d(foreign, 0, 32, local.data(), 16, 16, 2, 0, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"not allocated from this rank's heap"});
    // Nothing to move is not an error; one row ignores the pitches.
    ctx.heap->put_2d(buf, 0, 0, local.data(), 0, 16, 0, 1, ctx.stream);
    ctx.heap->get_2d(local.data(), 0, buf, 240, 0, 16, 1, 1, ctx.stream);
    ctx.heap->barrier(ctx.stream);
  });
}

// The executor's one-sided transfers to peers without load/store access: a head subset of a
// [B, rows, heads, D] plane is one pitched transfer per batch entry (one in all when it spans
// every row), a row subset of an lse plane [B, heads, rows] is one transfer, a contiguous
// region is one plain run.
TEST(CpuHeap2d, StridedRegionsGroupIntoPitchedTransfers) {
  using sp::detail::Geometry;
  const int64_t B = 2, R = 5, H = 6, D = 3;
  using Block = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // offset, pitch, run, rows
  auto blocks_of = [](const Geometry& g) {
    std::vector<Block> blocks;
    g.for_each_pitched([&](int64_t off, int64_t pitch, int64_t run, int64_t rows) {
      blocks.push_back({off, pitch, run, rows});
    });
    return blocks;
  };
  const Geometry plane = Geometry::contiguous(DType::kF32, {B, R, H, D});
  EXPECT_EQ(blocks_of(plane.slice(1, 1, 3).slice(2, 2, 3)),
            (std::vector<Block>{{(1 * H + 2) * D, H * D, 3 * D, 3},
                                {((R + 1) * H + 2) * D, H * D, 3 * D, 3}}));
  // All rows of a head subset: the batch dim continues the pitch, so one transfer.
  EXPECT_EQ(blocks_of(plane.slice(2, 0, 2)), (std::vector<Block>{{0, H * D, 2 * D, B * R}}));
  const Geometry lse = Geometry::contiguous(DType::kF32, {B, H, R});
  EXPECT_EQ(blocks_of(lse.slice(2, 1, 3)), (std::vector<Block>{{1, R, 3, B * H}}));
  // Whole rows [1, 3): one run of 2 rows per batch entry, at the batch stride.
  EXPECT_EQ(blocks_of(plane.slice(1, 1, 2)),
            (std::vector<Block>{{H * D, R * H * D, 2 * H * D, B}}));
  // A contiguous region is one plain run.
  EXPECT_EQ(blocks_of(plane.slice(0, 1, 1)),
            (std::vector<Block>{{R * H * D, R * H * D, R * H * D, 1}}));
  // Every run of for_each_run is covered once, in the same order.
  const Geometry region = plane.slice(1, 1, 3).slice(2, 2, 3).slice(0, 1, 1);
  std::vector<int64_t> from_runs, from_blocks;
  region.for_each_run([&](int64_t off, int64_t n) {
    for (int64_t i = 0; i < n; ++i) from_runs.push_back(off + i);
  });
  region.for_each_pitched([&](int64_t off, int64_t pitch, int64_t run, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < run; ++i) from_blocks.push_back(off + r * pitch + i);
    }
  });
  EXPECT_EQ(from_blocks, from_runs);
}

}  // namespace
}  // namespace tessera
