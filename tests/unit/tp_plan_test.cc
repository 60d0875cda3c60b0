// TpRequest and TpPlan on one rank: requests outside the contract are refused naming the
// field; every rank's tile schedule covers its output exactly once, in the documented order;
// communication tiles cover each share exactly once; signal slots are distinct.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/tp/plan.h"

namespace tessera::tp {
namespace {

void expect_invalid(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "missing '" << part << "' in: " << e.what();
    }
  }
}

TpRequest request(TpOp op, int64_t m, int ranks, int machines = 1) {
  TpRequest r;
  r.op = op;
  r.m = m;
  r.n = 8 * ranks;
  r.k = 4 * ranks;
  r.world_size = ranks;
  r.num_machines = machines;
  return r;
}

TEST(TpRequest, RefusesEachFieldByName) {
  auto with = [](const std::function<void(TpRequest&)>& change) {
    TpRequest r = request(TpOp::kAllGatherGemm, 16, 4);
    change(r);
    return [r] { validate_request(r); };
  };
  expect_invalid(with([](TpRequest& r) { r.m = 0; }), {"m = 0", "expected >= 1"});
  expect_invalid(with([](TpRequest& r) { r.n = -3; }), {"n = -3"});
  expect_invalid(with([](TpRequest& r) { r.k = 0; }), {"k = 0"});
  expect_invalid(with([](TpRequest& r) { r.dtype = DType::kU8; }),
                 {"dtype = u8", "bf16, f16 or f32"});
  expect_invalid(with([](TpRequest& r) { r.out_dtype = DType::kI64; }), {"out_dtype = i64"});
  expect_invalid(with([](TpRequest& r) { r.world_size = 0; }), {"world_size = 0"});
  expect_invalid(with([](TpRequest& r) { r.num_machines = 3; }),
                 {"num_machines = 3", "divisor of world_size = 4"});
  expect_invalid(with([](TpRequest& r) { r.n = 30; }), {"n = 30", "multiple of world_size = 4"});
  expect_invalid(with([](TpRequest& r) {
                   r.op = TpOp::kGemmReduceScatter;
                   r.k = 18;
                 }),
                 {"k = 18", "multiple of world_size = 4"});
  expect_invalid(with([](TpRequest& r) {
                   r.m = int64_t(1) << 40;
                   r.k = int64_t(1) << 20;
                 }),
                 {"2^40 elements"});
  expect_invalid([] { parse_tp_op("gemm_ag"); },
                 {"op = 'gemm_ag'", "ag_gemm, gemm_rs or gemm_a2a"});
  EXPECT_EQ(parse_tp_op("gemm_rs"), TpOp::kGemmReduceScatter);
}

TEST(TpPlan, RefusesPlansThatCannotRun) {
  auto with = [](const std::function<void(TpPlan&)>& change, int slots = 1024) {
    TpPlan p;
    p.request = request(TpOp::kAllGatherGemm, 64, 4, 2);
    change(p);
    return [p, slots] { validate_plan(p, slots); };
  };
  expect_invalid(with([](TpPlan& p) { p.tile_m = 0; }), {"tile_m = 0"});
  expect_invalid(with([](TpPlan& p) { p.tile_n = -1; }), {"tile_n = -1"});
  expect_invalid(with([](TpPlan& p) { p.comm_rows = -2; }), {"comm_rows = -2"});
  expect_invalid(with([](TpPlan& p) {
                   p.route = Route::kRing;
                   p.transfer = Transfer::kPull;
                 }),
                 {"route = ring with transfer = pull"});
  expect_invalid(with([](TpPlan& p) {
                   p.two_level = true;
                   p.request.num_machines = 1;
                 }),
                 {"two_level = true", "num_machines > 1"});
  expect_invalid(with([](TpPlan& p) {
                   p.two_level = true;
                   p.request.op = TpOp::kGemmAllToAll;
                 }),
                 {"two_level = true", "gemm_a2a"});
  // 64 rows in chunks of one: 64 signals and 4 released words, more than 10 slots.
  expect_invalid(with([](TpPlan& p) { p.comm_rows = 1; }, 10),
                 {"comm_rows = 1", "68 signal slots", "heap has 10"});
}

TEST(TpPlan, SchedulesCoverEveryOutputOnceInTheDocumentedOrder) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int machines = 1; machines <= 4; ++machines) {
      if (ranks % machines) continue;
      for (TpOp op : {TpOp::kAllGatherGemm, TpOp::kGemmReduceScatter, TpOp::kGemmAllToAll}) {
        for (int variant = 0; variant < 4; ++variant) {
          TpPlan plan;
          plan.request = request(op, 45, ranks, machines);
          plan.tile_m = 7;
          plan.tile_n = 3;
          plan.comm_rows = 4;
          if (variant == 1) plan.transfer = Transfer::kPull;
          if (variant == 2) plan.route = Route::kRing;
          if (variant == 3) {
            if (machines == 1 || op == TpOp::kGemmAllToAll) continue;
            plan.two_level = true;
          }
          validate_plan(plan, 1024);
          SCOPED_TRACE(describe(plan.request) + " " + describe(plan));
          for (int rank = 0; rank < ranks; ++rank) {
            const RankShapes s = rank_shapes(plan.request, rank);
            // The output space a rank's tiles cover: its out, or (ReduceScatter) all rows x N.
            const int64_t rows = op == TpOp::kGemmReduceScatter ? plan.request.m : s.out_rows;
            const int64_t cols = op == TpOp::kGemmAllToAll ? plan.request.n : s.out_cols;
            const int64_t row_space = op == TpOp::kGemmAllToAll ? s.a_rows : rows;
            std::vector<int> covered(size_t(row_space * cols), 0);
            const auto tiles = tile_schedule(plan, rank);
            for (const TileTask& t : tiles) {
              ASSERT_GT(t.rows, 0);
              ASSERT_GT(t.cols, 0);
              ASSERT_LE(t.rows, plan.tile_m);
              ASSERT_LE(t.cols, plan.tile_n);
              if (op != TpOp::kGemmAllToAll) {  // rows of one rank's share only
                const RowRange share = row_range(plan.request.m, ranks, t.block);
                ASSERT_GE(t.row_begin, share.begin);
                ASSERT_LE(t.row_begin + t.rows, share.begin + share.count);
              } else {  // columns of one owner only
                ASSERT_GE(t.col_begin, t.block * (plan.request.n / ranks));
                ASSERT_LE(t.col_begin + t.cols, (t.block + 1) * (plan.request.n / ranks));
              }
              for (int64_t i = 0; i < t.rows; ++i) {
                for (int64_t j = 0; j < t.cols; ++j)
                  ++covered[size_t((t.row_begin + i) * cols + t.col_begin + j)];
              }
            }
            for (size_t e = 0; e < covered.size(); ++e) ASSERT_EQ(covered[e], 1) << "element " << e;
            if (!tiles.empty() && op == TpOp::kAllGatherGemm && s.a_rows > 0) {
              EXPECT_EQ(tiles.front().block, rank) << "AllGather starts with the local rows";
            }
            if (!tiles.empty() && op != TpOp::kAllGatherGemm) {
              EXPECT_EQ(owner_order(plan, rank).back(), rank) << "own tiles last";
              EXPECT_EQ(owner_order(plan, rank).front(), (rank + 1) % ranks);
            }
            const auto order = gather_order(plan, rank);
            EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), size_t(ranks));
            EXPECT_EQ(order.front(), rank);
          }
        }
      }
    }
  }
}

TEST(TpPlan, ChunksCoverEachShareOnceWithDistinctSignals) {
  TpPlan plan;
  plan.request = request(TpOp::kAllGatherGemm, 45, 4);
  plan.transfer = Transfer::kPull;
  for (int64_t comm_rows : {0, 1, 4, 11, 100}) {
    plan.comm_rows = comm_rows;
    std::set<int> slots;
    for (int source = 0; source < 4; ++source) {
      const RowRange share = row_range(45, 4, source);
      int64_t next = share.begin;
      for (int64_t c = 0; c < num_chunks(plan, source); ++c) {
        const RowRange rows = chunk_rows(plan, source, c);
        EXPECT_EQ(rows.begin, next);
        EXPECT_GT(rows.count, 0);
        for (int64_t row = rows.begin; row < rows.begin + rows.count; ++row) {
          EXPECT_EQ(chunk_of_row(plan, source, row), c);
        }
        next += rows.count;
        EXPECT_TRUE(slots.insert(chunk_signal(plan, source, c)).second);
      }
      EXPECT_EQ(next, share.begin + share.count);
      EXPECT_TRUE(slots.insert(ready_signal(plan, source)).second);
      EXPECT_TRUE(slots.insert(released_signal(plan, source)).second);
    }
    EXPECT_EQ(int(slots.size()), num_signal_slots(plan));
    EXPECT_EQ(*slots.rbegin(), num_signal_slots(plan) - 1);
  }
}

// fuzz_tp_planner's finding: a communication tile of 2^63 - 1 rows overflowed the chunk count.
TEST(TpPlan, HugeCommunicationTileIsOneChunk) {
  TpPlan plan;
  plan.request = request(TpOp::kAllGatherGemm, 45, 4);
  plan.comm_rows = std::numeric_limits<int64_t>::max();
  validate_plan(plan, 1024);
  for (int source = 0; source < 4; ++source) {
    EXPECT_EQ(num_chunks(plan, source), 1);
    EXPECT_EQ(chunk_rows(plan, source, 0).count, row_range(45, 4, source).count);
  }
}

TEST(TpRequest, RowSharesDifferByAtMostOneAndCoverM) {
  for (int64_t m : {1, 3, 7, 16384, 16385}) {
    for (int p = 1; p <= 8; ++p) {
      int64_t next = 0;
      for (int r = 0; r < p; ++r) {
        const RowRange share = row_range(m, p, r);
        EXPECT_EQ(share.begin, next);
        EXPECT_GE(share.count, m / p);
        EXPECT_LE(share.count, m / p + 1);
        next += share.count;
      }
      EXPECT_EQ(next, m);
    }
  }
}

}  // namespace
}  // namespace tessera::tp
