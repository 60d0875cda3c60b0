// Tensor-parallel GEMMs with fused communication on the cpu backend: every op, transfer,
// route and the two-level form on 1..8 ranks in 1..4 machines, M from 1 to 16384 with M not
// divisible by the tile or by P, against a float64 reference; fused and unfused agree; runs
// repeat bitwise and leave every signal reset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "cpu_dist_util.h"
#include "tessera/sp/cost_model.h"
#include "tessera/tp/operation.h"
#include "tessera/tp/planner.h"
#include "tp_test_util.h"

namespace tessera::testing {
namespace {

using tp::TpOp;
using tp::TpPlan;
using tp::TpRequest;

// What one rank's run produced.
struct RankOutput {
  std::vector<std::byte> out;
  std::vector<std::byte> repeated;  // a second run of the same operation
  int signals_left = 0;             // signal slots not back at 0 after the runs
};

// Runs `plan` on its ranks (cpu), twice, with fresh outputs poisoned with NaN.
std::vector<RankOutput> run_plan(const TpPlan& plan, const TpProblem& problem) {
  const TpRequest& r = plan.request;
  std::vector<RankOutput> results(size_t(r.world_size));
  ContextOptions options = test_options();
  // The heap the fused buffers need, and no more than their alignment beside (a smaller heap
  // fails: TpOperation.AHeapTooSmallForTheFusedBuffersIsRefused).
  options.heap_bytes = std::max<size_t>(tp::fused_symmetric_bytes(plan) + 3 * 256, 1);
  run_cpu_ranks(r.world_size, r.num_machines, options, [&](RankContext& ctx) {
    tp::TpOperation op(ctx, plan);
    const tp::RankShapes s = op.shapes();
    auto a = problem.a(ctx.rank), b = problem.b(ctx.rank), bias = problem.bias(ctx.rank);
    const Device cpu = Device::cpu();
    TensorView a_view(a.data(), r.dtype, cpu, {s.a_rows, s.a_cols});
    TensorView b_view(b.data(), r.dtype, cpu, {s.b_rows, s.b_cols});
    TensorView bias_view =
        r.has_bias ? TensorView(bias.data(), r.out_dtype, cpu, {s.bias}) : TensorView();
    RankOutput& mine = results[size_t(ctx.rank)];
    for (auto* out : {&mine.out, &mine.repeated}) {
      out->resize(size_t(s.out_rows * s.out_cols) * dtype_size(r.out_dtype));
      for (int64_t e = 0; e < s.out_rows * s.out_cols; ++e) {
        store_from_float(out->data(), r.out_dtype, e, std::numeric_limits<float>::quiet_NaN());
      }
      op.run(a_view, b_view, bias_view,
             TensorView(out->data(), r.out_dtype, cpu, {s.out_rows, s.out_cols}), ctx.stream);
    }
    ctx.heap->barrier(ctx.stream);
    for (int slot = 0; plan.fused && slot < tp::num_signal_slots(plan); ++slot) {
      mine.signals_left += ctx.heap->read_signal(slot) != 0;
    }
  });
  return results;
}

void expect_matches_reference(const TpPlan& plan, const TpProblem& problem,
                              const std::vector<RankOutput>& results) {
  const TpRequest& r = plan.request;
  for (int rank = 0; rank < r.world_size; ++rank) {
    const tp::RankShapes s = tp::rank_shapes(r, rank);
    const RankOutput& got = results[size_t(rank)];
    const int sum_roundings = !plan.fused ? r.world_size : plan.two_level ? 2 : 1;
    EXPECT_EQ(got.out, got.repeated) << "rank " << rank << ": a second run differs";
    EXPECT_EQ(got.signals_left, 0) << "rank " << rank << ": signals not reset";
    int failures = 0;
    for (int64_t i = 0; i < s.out_rows && failures < 3; ++i) {
      for (int64_t j = 0; j < s.out_cols && failures < 3; ++j) {
        const double v = load_as_float(got.out.data(), r.out_dtype, i * s.out_cols + j);
        const auto want = problem.expected(rank, i, j, sum_roundings);
        if (!(std::fabs(v - want.value) <= want.bound)) {
          ADD_FAILURE() << describe(plan.request) << " " << tp::describe(plan) << ": rank " << rank
                        << " out[" << i << ", " << j << "] = " << v << ", expected " << want.value
                        << " within " << want.bound;
          ++failures;
        }
      }
    }
  }
}

TpPlan make_plan(TpOp op, int ranks, int machines, int64_t m, int64_t n, int64_t k) {
  TpPlan plan;
  plan.request.op = op;
  plan.request.m = m;
  plan.request.n = n;
  plan.request.k = k;
  plan.request.world_size = ranks;
  plan.request.num_machines = machines;
  plan.tile_m = 16;
  plan.tile_n = 8;
  return plan;
}

// The variants a layout runs: fused push/pull/ring (AllGather), two-level across machines,
// and the unfused pair.
std::vector<TpPlan> variants(const TpPlan& base) {
  std::vector<TpPlan> plans;
  TpPlan p = base;
  plans.push_back(p);
  if (base.request.op == TpOp::kAllGatherGemm) {
    p = base;
    p.transfer = tp::Transfer::kPull;
    plans.push_back(p);
    p = base;
    p.route = tp::Route::kRing;
    p.comm_rows = 0;
    plans.push_back(p);
  }
  if (base.request.num_machines > 1 && base.request.op != TpOp::kGemmAllToAll) {
    p = base;
    p.two_level = true;
    plans.push_back(p);
  }
  p = base;
  p.fused = false;
  plans.push_back(p);
  return plans;
}

TEST(TpOperation, EveryOpVariantAndLayoutMatchesTheReference) {
  for (const Layout& layout : all_layouts()) {
    for (TpOp op : {TpOp::kAllGatherGemm, TpOp::kGemmReduceScatter, TpOp::kGemmAllToAll}) {
      // M: one row, fewer rows than ranks, and a count no tile or rank count divides.
      for (int64_t m : {int64_t(1), int64_t(5), int64_t(37)}) {
        TpPlan base =
            make_plan(op, layout.ranks, layout.machines, m, 6 * layout.ranks, 5 * layout.ranks);
        base.comm_rows = 3;
        base.request.has_bias = m != 5;
        base.request.weight_layout = m == 37 ? tp::WeightLayout::kNK : tp::WeightLayout::kKN;
        const TpProblem problem(base.request);
        std::vector<std::vector<std::byte>> fused_out;
        for (const TpPlan& plan : variants(base)) {
          SCOPED_TRACE(layout_name(layout) + " " + describe(plan.request) + " " +
                       tp::describe(plan));
          const auto results = run_plan(plan, problem);
          expect_matches_reference(plan, problem, results);
          // Every output element is one float32 dot product in k order: all AllGather and
          // AllToAll variants give the same bits (ReduceScatter's sum differs by rounding).
          if (op != TpOp::kGemmReduceScatter) {
            if (fused_out.empty()) {
              for (const auto& rr : results) fused_out.push_back(rr.out);
            } else {
              for (size_t rank = 0; rank < results.size(); ++rank) {
                EXPECT_EQ(results[rank].out, fused_out[rank]) << "rank " << rank;
              }
            }
          }
        }
      }
    }
  }
}

TEST(TpOperation, AHeapTooSmallForTheFusedBuffersIsRefused) {
  for (TpOp op : {TpOp::kAllGatherGemm, TpOp::kGemmReduceScatter, TpOp::kGemmAllToAll}) {
    TpRequest r;
    r.op = op;
    r.m = 100;
    r.n = 64;
    r.k = 96;
    r.world_size = 2;
    TpPlan plan = tp::plan_tp(r, cpu_topology(2, 1), sp::CostModel{});
    plan.fused = true;
    const size_t need = tp::fused_symmetric_bytes(plan);
    // bf16: the gathered rows [M, K]; both ranks' padded shares [2][50][N]; rows x N / 2.
    const size_t want = op == TpOp::kAllGatherGemm       ? 100 * 96 * 2
                        : op == TpOp::kGemmReduceScatter ? 2 * 50 * 64 * 2
                                                         : 100 * 32 * 2;
    EXPECT_EQ(need, want) << tp::tp_op_name(op);
    ContextOptions options = test_options();
    options.heap_bytes = need / 2;
    std::mutex mu;
    std::vector<std::string> errors;
    run_cpu_ranks(2, 1, options, [&](RankContext& ctx) {
      try {
        tp::TpOperation refused(ctx, plan);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(e.what());
      }
    });
    ASSERT_EQ(errors.size(), 2u) << tp::tp_op_name(op) << ": every rank refuses";
    for (const std::string& e : errors) {
      EXPECT_NE(e.find("heap_bytes"), std::string::npos) << e;
    }
  }
}

TEST(TpOperation, DtypesAndLargeRowCounts) {
  // bf16 -> f32, f16, f32 -> bf16; M up to 16384 with small N and K.
  const struct {
    DType in, out;
    int64_t m;
  } cases[] = {{DType::kBF16, DType::kF32, 16384},
               {DType::kF16, DType::kF16, 4099},
               {DType::kF32, DType::kBF16, 1000}};
  for (const auto& c : cases) {
    for (TpOp op : {TpOp::kAllGatherGemm, TpOp::kGemmReduceScatter, TpOp::kGemmAllToAll}) {
      TpPlan plan = make_plan(op, 4, 2, c.m, 16, 12);
      plan.tile_m = 128;
      plan.tile_n = 16;
      plan.comm_rows = 512;
      plan.request.dtype = c.in;
      plan.request.out_dtype = c.out;
      plan.request.has_bias = true;
      const TpProblem problem(plan.request, 11);
      for (const TpPlan& variant : {plan, [&] {
                                      TpPlan t = plan;
                                      t.two_level = op != TpOp::kGemmAllToAll;
                                      return t;
                                    }()}) {
        SCOPED_TRACE(describe(variant.request) + " " + tp::describe(variant));
        expect_matches_reference(variant, problem, run_plan(variant, problem));
      }
    }
  }
}

}  // namespace
}  // namespace tessera::testing
