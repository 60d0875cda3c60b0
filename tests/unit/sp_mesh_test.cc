// Mesh-Attention: the greedy schedule (Algorithm 2), bytes per GPU against the paper's
// formula, the local Q-KV property, causal balance under striping, and the tile search.
#include <gtest/gtest.h>

#include <set>

#include "tessera/core/error.h"
#include "tessera/sp/sim.h"
#include "tessera/sp/validator.h"
#include "unit/sp_test_util.h"

namespace tessera::sp {
namespace {

using testing::gpu_topology;
using testing::request;

// Every block once, only when its Q and KV have arrived, each row sent after it is complete,
// the receives and sends counted as the paper says.
void check_schedule(int a, int b, const MeshCosts& costs) {
  const std::vector<MeshStep> steps = mesh_greedy_schedule(a, b, costs);
  std::set<std::pair<int, int>> done;
  int rq = 0, rk = 0, so = 0;
  for (const MeshStep& s : steps) {
    for (const auto& [x, y] : s.blocks) {
      EXPECT_LE(x, rq) << "block q" << x << " before its Q arrived";
      EXPECT_LE(y, rk) << "block kv" << y << " before its KV arrived";
      EXPECT_TRUE(done.insert({x, y}).second) << "block " << x << "," << y << " twice";
    }
    if (s.comm == 'Q') ++rq;
    if (s.comm == 'K') ++rk;
    if (s.comm == 'O') {
      ++so;
      for (int y = 0; y < b; ++y) EXPECT_TRUE(done.count({so, y})) << "row " << so << " sent early";
      EXPECT_EQ(rq, a - 1);
      EXPECT_EQ(rk, b - 1);
    }
    if (s.comm == 'Q' || s.comm == 'K') {
      EXPECT_LE(int(s.blocks.size()), s.comm == 'Q' ? costs.q_blocks : costs.kv_blocks);
    } else if (s.comm == 'O') {
      EXPECT_LE(int(s.blocks.size()), costs.o_blocks);
    }
  }
  EXPECT_EQ(rq, a - 1);
  EXPECT_EQ(rk, b - 1);
  EXPECT_EQ(so, a - 1);
  EXPECT_EQ(int(done.size()), a * b);
}

TEST(SpMesh, GreedyScheduleInvariants) {
  for (int a = 1; a <= 6; ++a) {
    for (int b = 1; b <= 6; ++b) {
      for (MeshCosts c :
           {MeshCosts{1, 1, 1}, MeshCosts{1, 2, 2}, MeshCosts{3, 5, 4}, MeshCosts{8, 8, 8}}) {
        check_schedule(a, b, c);
      }
    }
  }
  EXPECT_THROW(mesh_greedy_schedule(0, 2, {}), Error);
  EXPECT_THROW(mesh_greedy_schedule(2, 2, {0, 1, 1}), Error);
}

TEST(SpMesh, GreedySchedulePrefersTheMoreProfitableReceive) {
  // 2 x 2, one block hides each transfer: Q first (tie, Q is cheaper), then KV unlocks the
  // two blocks of column 1 ... row 1 is finished before it is sent, own row last.
  const std::vector<MeshStep> s = mesh_greedy_schedule(2, 2, {1, 1, 1});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].comm, 'Q');
  EXPECT_EQ(s[0].blocks, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_EQ(s[1].comm, 'K');
  EXPECT_EQ(s[1].blocks, (std::vector<std::pair<int, int>>{{1, 0}}));
  EXPECT_EQ(s[2].comm, 0);
  EXPECT_EQ(s[2].blocks, (std::vector<std::pair<int, int>>{{1, 1}}));
  EXPECT_EQ(s[3].comm, 'O');
  EXPECT_EQ(s[3].blocks, (std::vector<std::pair<int, int>>{{0, 1}}));
  // A KV transfer that costs twice as much as a Q transfer: with 2 Q already in, one KV
  // unlocks 3 blocks for 2 block-times (1.5) against one more Q unlocking 1 for 1.
  const std::vector<MeshStep> t = mesh_greedy_schedule(4, 2, {1, 2, 1});
  std::string comms;
  for (const MeshStep& step : t) comms += step.comm ? step.comm : '-';
  EXPECT_EQ(comms.substr(0, 4), "QQKQ") << comms;
}

TEST(SpMesh, BytesPerGpuMatchThePaperFormula) {
  const CostModel model;
  for (int P : {4, 6, 8, 9, 16}) {
    const int64_t L = 8 * P;
    for (int a = 1; a <= P; ++a) {
      if (P % a != 0) continue;
      const int b = P / a;
      PlanRequest req = request(gpu_topology(1, P), Method::kMesh, L, 4, 2, false, 0);
      req.options.mesh_rows = a;
      req.options.mesh_cols = b;
      const Plan plan = plan_mesh(req, model);
      const int64_t formula = mesh_formula_bytes_in(req.shape(), P, a, b);
      for (int r = 0; r < P; ++r) {
        EXPECT_EQ(bytes_received(plan, r), formula) << "P " << P << " tile " << a << "x" << b;
      }
    }
  }
  // A square tile moves less than the ring (a = 1) at 16 ranks.
  AttentionShape s = request(gpu_topology(1, 16), Method::kMesh, 128, 4, 4, false, 0).shape();
  EXPECT_LT(mesh_formula_bytes_in(s, 16, 4, 4), mesh_formula_bytes_in(s, 16, 1, 16) / 1.5);
}

TEST(SpMesh, EveryRankComputesItsLocalBlock) {
  PlanRequest req = request(gpu_topology(2, 3), Method::kMesh, 60, 4, 4, false, 0);
  req.options.mesh_rows = 2;
  req.options.mesh_cols = 3;
  const Plan plan = plan_mesh(req, CostModel());
  for (int r = 0; r < 6; ++r) {
    bool local = false;
    for (const Step& s : plan.ranks[r].steps) {
      if (s.kind != StepKind::kCompute) continue;
      const SlotDesc& q = plan.ranks[r].slots[s.compute.q.ref.slot];
      for (const AttnOperand& kv : s.compute.kv) {
        local |= q.binding == SlotBinding::kInputQ &&
                 plan.ranks[r].slots[kv.ref.slot].binding == SlotBinding::kInputKV;
      }
    }
    EXPECT_TRUE(local) << "rank " << r << " never attends its own Q to its own KV";
  }
}

TEST(SpMesh, StripedCausalBalancesTheWork) {
  for (int P : {4, 6, 8}) {
    PlanRequest req = request(gpu_topology(1, P), Method::kMesh, 32 * P, 4, 4, true, 0);
    req.options.mesh_rows = 2;
    req.options.mesh_cols = P / 2;
    const Plan plan = plan_mesh(req, CostModel());
    EXPECT_EQ(plan.layout, TokenLayout::kStriped);
    EXPECT_TRUE(validate_plan(plan).ok());
    int64_t lo = -1, hi = 0;
    for (int r = 0; r < P; ++r) {
      int64_t pairs = 0;
      for (const Step& s : plan.ranks[r].steps) {
        if (s.kind != StepKind::kCompute) continue;
        for (const AttnOperand& kv : s.compute.kv) {
          pairs += visible_pairs(s.compute.q.positions, kv.positions, true);
        }
      }
      lo = lo < 0 ? pairs : std::min(lo, pairs);
      hi = std::max(hi, pairs);
    }
    EXPECT_LT(double(hi) / double(lo), 1.1) << "P " << P << ": " << lo << " .. " << hi;
  }
}

TEST(SpMesh, TileSearchPicksTheFastestSimulatedShape) {
  const CostModel model = CostModel::for_topology(gpu_topology(2, 4, 10.0));
  PlanRequest req = request(gpu_topology(2, 4, 10.0), Method::kMesh, 4096, 8, 8, false, 0, 64);
  const Plan chosen = plan_mesh(req, model);
  const double chosen_us = simulate(chosen, model).total_us;
  for (int a : {1, 2, 4, 8}) {
    req.options.mesh_rows = a;
    req.options.mesh_cols = 8 / a;
    const double us = simulate(plan_mesh(req, model), model).total_us;
    EXPECT_LE(chosen_us, us + 1e-6)
        << "tile " << a << "x" << 8 / a << " is faster than " << chosen.param("tile");
  }
}

TEST(SpMesh, RefusesOneSidedAndBadTiles) {
  PlanRequest req = request(gpu_topology(1, 4), Method::kMesh, 64, 4, 4, false, 0);
  req.options.mesh_rows = 3;
  req.options.mesh_cols = 1;
  EXPECT_THROW(plan_mesh(req, CostModel()), Error);
  req.options.mesh_rows = 0;
  req.options.mesh_cols = 0;
  req.options.comm = CommMode::kOneSided;
  EXPECT_THROW(plan_mesh(req, CostModel()), Error);
}

}  // namespace
}  // namespace tessera::sp
