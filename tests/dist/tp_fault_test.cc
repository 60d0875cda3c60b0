// Bad input and faults for the tensor-parallel operations on the cpu backend (4 ranks in 2
// machines): operands of the wrong shape, dtype, device or layout are refused naming the
// argument; a rank that plans differently fails every rank at construction; a rank that
// stalls (never signals in time) or dies mid-run stops every other rank within the timeout,
// naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/cpu/cpu_fault.h"
#include "dist/cpu_dist_util.h"
#include "dist/cpu_fault_util.h"
#include "tessera/tp/operation.h"
#include "tp_test_util.h"

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;
using tp::TpOp;
using tp::TpPlan;

constexpr int kRanks = 4;
constexpr int kMachines = 2;
constexpr int kVictim = 2;

TpPlan plan_for(TpOp op, bool two_level = false) {
  TpPlan plan;
  plan.request.op = op;
  plan.request.m = 37;
  plan.request.n = 24;
  plan.request.k = 20;
  plan.request.has_bias = true;
  plan.request.world_size = kRanks;
  plan.request.num_machines = kMachines;
  plan.tile_m = 8;
  plan.tile_n = 8;
  plan.comm_rows = 4;
  plan.two_level = two_level;
  return plan;
}

struct RankOutcome {
  bool failed = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  double stopped_ms = 0;
  int64_t calls_created = -1, calls_ran = -1;
};

// Every rank constructs plan_of(rank) and runs it once with correct operands.
std::vector<RankOutcome> run_ranks(const std::function<TpPlan(int)>& plan_of) {
  std::vector<RankOutcome> outcomes(kRanks);
  const auto start = Clock::now();
  ContextOptions options = test_options();
  options.emulated_link.bandwidth_gbps = 1e6;  // no pacing delays: only the fault is slow
  options.emulated_link.latency_us = 0.0;
  options.emulated_link.preset = "custom";
  try {
    run_cpu_ranks(kRanks, kMachines, options, [&](RankContext& ctx) {
      RankOutcome& mine = outcomes[size_t(ctx.rank)];
      try {
        const TpPlan plan = plan_of(ctx.rank);
        tp::TpOperation op(ctx, plan);
        mine.calls_created = cpu::communication_calls();
        const TpProblem problem(plan.request);
        const tp::RankShapes s = op.shapes();
        auto a = problem.a(ctx.rank), b = problem.b(ctx.rank), bias = problem.bias(ctx.rank);
        std::vector<std::byte> out(size_t(s.out_rows * s.out_cols) * 2);
        const Device cpu = Device::cpu();
        op.run(TensorView(a.data(), DType::kBF16, cpu, {s.a_rows, s.a_cols}),
               TensorView(b.data(), DType::kBF16, cpu, {s.b_rows, s.b_cols}),
               TensorView(bias.data(), DType::kBF16, cpu, {s.bias}),
               TensorView(out.data(), DType::kBF16, cpu, {s.out_rows, s.out_cols}), ctx.stream);
        mine.calls_ran = cpu::communication_calls();
        ctx.world->barrier(ctx.stream);  // what the next layer's collective would do
      } catch (const Error& e) {
        mine.failed = true;
        mine.code = e.code();
        mine.message = e.what();
        mine.stopped_ms = ms_since(start);
        throw;
      }
      mine.stopped_ms = ms_since(start);
    });
  } catch (const Error&) {
  }
  return outcomes;
}

const TpPlan kCases[] = {plan_for(TpOp::kAllGatherGemm), plan_for(TpOp::kAllGatherGemm, true),
                         plan_for(TpOp::kGemmReduceScatter),
                         plan_for(TpOp::kGemmReduceScatter, true), plan_for(TpOp::kGemmAllToAll)};

TEST(TpFault, RankStallingMidRunTimesOutTheOthersNamingIt) {
  constexpr int64_t kTimeoutMs = 1000;
  ScopedWaitTimeout timeout(kTimeoutMs);
  for (const TpPlan& plan : kCases) {
    SCOPED_TRACE(describe(plan.request) + " " + tp::describe(plan));
    const auto clean = run_ranks([&](int) { return plan; });
    const RankOutcome& v = clean[kVictim];
    ASSERT_FALSE(v.failed) << v.message;
    ASSERT_GT(v.calls_ran, v.calls_created);
    const int64_t call = v.calls_created + (v.calls_ran - v.calls_created + 1) / 2;
    ScopedCpuFault fault(str("stall:", kVictim, ":", call));
    const auto start = Clock::now();
    const auto out = run_ranks([&](int) { return plan; });
    int named = 0;
    for (int r = 0; r < kRanks; ++r) {
      if (r == kVictim) continue;
      const RankOutcome& o = out[size_t(r)];
      ASSERT_TRUE(o.failed) << "rank " << r << " finished without rank " << kVictim;
      EXPECT_TRUE(o.code == ErrorCode::kTimeout || o.code == ErrorCode::kPeerFailure) << o.message;
      EXPECT_LT(o.stopped_ms, kTimeoutMs + 4000) << o.message;
      named += o.message.find(str("rank ", kVictim)) != std::string::npos;
    }
    EXPECT_GE(named, 1);
    EXPECT_TRUE(out[kVictim].failed);
    EXPECT_LT(ms_since(start), 2 * kTimeoutMs + 6000);
  }
}

TEST(TpFault, RankDyingMidRunStopsTheOthers) {
  ScopedWaitTimeout timeout(60000);  // they must stop at once, not when this expires
  for (const TpPlan& plan : kCases) {
    SCOPED_TRACE(describe(plan.request) + " " + tp::describe(plan));
    const auto clean = run_ranks([&](int) { return plan; });
    const RankOutcome& v = clean[kVictim];
    const int64_t call = v.calls_created + (v.calls_ran - v.calls_created + 1) / 2;
    ScopedCpuFault fault(str("die:", kVictim, ":", call));
    const auto out = run_ranks([&](int) { return plan; });
    for (int r = 0; r < kRanks; ++r) {
      const RankOutcome& o = out[size_t(r)];
      ASSERT_TRUE(o.failed) << "rank " << r;
      EXPECT_LT(o.stopped_ms, 20000) << o.message;
      if (r != kVictim) {
        EXPECT_EQ(o.code, ErrorCode::kPeerFailure) << o.message;
        EXPECT_NE(o.message.find(str("rank ", kVictim)), std::string::npos) << o.message;
      }
    }
  }
}

TEST(TpFault, RankWithDifferentPlanFailsEveryRankAtConstruction) {
  ScopedWaitTimeout timeout(30000);
  const std::function<void(TpPlan&)> changes[] = {
      [](TpPlan& p) { p.request.m += 1; }, [](TpPlan& p) { p.tile_n = 16; },
      [](TpPlan& p) { p.transfer = tp::Transfer::kPull; }, [](TpPlan& p) { p.fused = false; }};
  for (const auto& change : changes) {
    const auto out = run_ranks([&](int rank) {
      TpPlan p = plan_for(TpOp::kAllGatherGemm);
      if (rank == kVictim) change(p);
      return p;
    });
    for (int r = 0; r < kRanks; ++r) {
      const RankOutcome& o = out[size_t(r)];
      ASSERT_TRUE(o.failed) << "rank " << r;
      EXPECT_EQ(o.calls_created, -1) << "rank " << r << " constructed its operation";
      EXPECT_EQ(o.code, ErrorCode::kInvalidArgument) << o.message;
      const int differing = r == kVictim ? 0 : kVictim;
      EXPECT_NE(o.message.find(str("rank ", differing, " planned a different")), std::string::npos)
          << o.message;
    }
  }
}

// Operands that do not match the plan: each refused naming the argument, before any rank
// communicates (so all ranks fail alike and nobody waits).
TEST(TpBadInput, RunRefusesOperandsNamingTheArgument) {
  struct Case {
    const char* what;
    std::function<void(tp::TpOperation&, const tp::RankShapes&)> call;
    std::vector<std::string> parts;
  };
  std::vector<std::byte> memory(1 << 16);
  void* p = memory.data();
  const Device cpu = Device::cpu();
  auto view = [&](DType d, int64_t r, int64_t c) { return TensorView(p, d, cpu, {r, c}); };
  const TpPlan plan = plan_for(TpOp::kGemmReduceScatter);
  const std::vector<Case> cases = {
      {"a rows",
       [&](tp::TpOperation& op, const tp::RankShapes& s) {
         op.run(view(DType::kBF16, s.a_rows - 1, s.a_cols), view(DType::kBF16, s.b_rows, s.b_cols),
                TensorView(p, DType::kBF16, cpu, {s.bias}),
                view(DType::kBF16, s.out_rows, s.out_cols), Stream::cpu());
       },
       {"a = ", "expected shape [37, 5]"}},
      {"b dtype",
       [&](tp::TpOperation& op, const tp::RankShapes& s) {
         op.run(view(DType::kBF16, s.a_rows, s.a_cols), view(DType::kF16, s.b_rows, s.b_cols),
                TensorView(p, DType::kBF16, cpu, {s.bias}),
                view(DType::kBF16, s.out_rows, s.out_cols), Stream::cpu());
       },
       {"b", "bf16"}},
      {"out too small",
       [&](tp::TpOperation& op, const tp::RankShapes& s) {
         op.run(view(DType::kBF16, s.a_rows, s.a_cols), view(DType::kBF16, s.b_rows, s.b_cols),
                TensorView(p, DType::kBF16, cpu, {s.bias}),
                view(DType::kBF16, s.out_rows - 1, s.out_cols), Stream::cpu());
       },
       {"out = ", ", 24] cpu: expected shape [", "(this rank's rows, N output features)"}},
      {"out on cuda",
       [&](tp::TpOperation& op, const tp::RankShapes& s) {
         op.run(view(DType::kBF16, s.a_rows, s.a_cols), view(DType::kBF16, s.b_rows, s.b_cols),
                TensorView(p, DType::kBF16, cpu, {s.bias}),
                TensorView(p, DType::kBF16, Device::cuda(0), {s.out_rows, s.out_cols}),
                Stream::cpu());
       },
       {"out", "cuda:0"}},
      {"non-contiguous a",
       [&](tp::TpOperation& op, const tp::RankShapes& s) {
         op.run(TensorView(p, DType::kBF16, cpu, {s.a_rows, s.a_cols}, {s.a_cols + 1, 1}),
                view(DType::kBF16, s.b_rows, s.b_cols), TensorView(p, DType::kBF16, cpu, {s.bias}),
                view(DType::kBF16, s.out_rows, s.out_cols), Stream::cpu());
       },
       {"a", "contiguous"}},
      {"bias missing",
       [&](tp::TpOperation& op, const tp::RankShapes& s) {
         op.run(view(DType::kBF16, s.a_rows, s.a_cols), view(DType::kBF16, s.b_rows, s.b_cols),
                TensorView(), view(DType::kBF16, s.out_rows, s.out_cols), Stream::cpu());
       },
       {"bias", "the plan has a bias"}},
      {"bias length",
       [&](tp::TpOperation& op, const tp::RankShapes& s) {
         op.run(view(DType::kBF16, s.a_rows, s.a_cols), view(DType::kBF16, s.b_rows, s.b_cols),
                TensorView(p, DType::kBF16, cpu, {s.bias - 1}),
                view(DType::kBF16, s.out_rows, s.out_cols), Stream::cpu());
       },
       {"bias = ", "expected shape [24]"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::string> messages(kRanks);
    EXPECT_THROW(run_cpu_ranks(kRanks, kMachines, test_options(),
                               [&](RankContext& ctx) {
                                 tp::TpOperation op(ctx, plan);
                                 const tp::RankShapes s = op.shapes();
                                 try {
                                   c.call(op, s);
                                 } catch (const Error& e) {
                                   EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
                                   messages[size_t(ctx.rank)] = e.what();
                                   throw;
                                 }
                               }),
                 Error);
    for (int r = 0; r < kRanks; ++r) {
      for (const std::string& part : c.parts) {
        EXPECT_NE(messages[size_t(r)].find(part), std::string::npos)
            << "rank " << r << ": missing '" << part << "' in: " << messages[size_t(r)];
      }
    }
  }
}

TEST(TpBadInput, PlanForOtherWorldIsRefused) {
  EXPECT_THROW(
      run_cpu_ranks(2, 1, test_options(),
                    [&](RankContext& ctx) {
                      expect_error(
                          [&] { tp::TpOperation op(ctx, plan_for(TpOp::kAllGatherGemm)); },
                          ErrorCode::kInvalidArgument,
                          {"plan.request.world_size = 4", "expected the context's 2 ranks"});
                      throw Error(ErrorCode::kInvalidArgument, "done");
                    }),
      Error);
}

}  // namespace
}  // namespace tessera::testing
