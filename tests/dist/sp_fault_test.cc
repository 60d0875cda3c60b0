// Faults in a real sequence-parallel run on the cpu backend (4 ranks in 2 machines): one rank
// dies in the middle of SpAttention::run, stalls there beyond the wait timeout, or creates a
// different plan (other shape, other method, or one its planner refuses). Every other rank
// must stop with an error that names the rank it waited for (directly, or through the error
// of the rank it waited for, which names its own), within the timeout, in run() or, where its
// part of the plan no longer needed the victim, at the world barrier that follows (a model's
// next collective); run_cpu_ranks must rethrow (so the CLI exits non-zero); nothing may hang.
// Faults are injected with TESSERA_CPU_FAULT (src/comm/cpu/cpu_fault.h) at the victim's
// communication call halfway between the end of create() and the end of run(), counted on a clean
// run first.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/cpu/cpu_fault.h"
#include "dist/cpu_dist_util.h"
#include "dist/cpu_fault_util.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::sp {
namespace {

using tessera::testing::ScopedWaitTimeout;
using Clock = std::chrono::steady_clock;
using tessera::testing::ms_since;
using tessera::testing::ScopedCpuFault;

constexpr int kRanks = 4;
constexpr int kMachines = 2;
constexpr int kVictim = 2;

PlanRequest request_for(Method method, CommMode comm) {
  PlanRequest r;
  r.seq_len = 37;
  r.heads = 4;
  r.kv_heads = 2;
  r.head_dim = 8;
  r.causal = true;
  r.dtype = DType::kF32;
  r.options.method = method;
  r.options.comm = comm;
  return r;
}

ContextOptions context_options() {
  ContextOptions o;
  o.heap_bytes = size_t(1) << 22;
  o.emulated_link.bandwidth_gbps = 1e6;  // no pacing delays: only the fault is slow
  o.emulated_link.latency_us = 0.0;
  o.emulated_link.preset = "custom";
  return o;
}

struct RankOutcome {
  bool failed = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  double stopped_ms = 0;       // from the start of the run to the rank's return or error
  int64_t calls_created = -1;  // communication calls after create()
  int64_t calls_ran = -1;      // and after run()
};

struct Outcome {
  std::vector<RankOutcome> ranks = std::vector<RankOutcome>(kRanks);
  bool threw = false;  // run_cpu_ranks rethrew
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  double total_ms = 0;
};

// Creates SpAttention with request_of(rank) on every rank and runs it once.
Outcome run_layer(const std::function<PlanRequest(int)>& request_of) {
  Outcome out;
  const auto start = Clock::now();
  try {
    run_cpu_ranks(kRanks, kMachines, context_options(), [&](RankContext& ctx) {
      RankOutcome& mine = out.ranks[size_t(ctx.rank)];
      try {
        auto layer = SpAttention::create(ctx, request_of(ctx.rank));
        mine.calls_created = cpu::communication_calls();
        const AttentionShape& s = layer->shape();
        const int64_t rows = layer->local_rows();
        auto input = [&](int heads) {
          Tensor t = Tensor::empty({s.batch, rows, heads, s.head_dim}, s.dtype, Device::cpu());
          std::fill_n(t.data_as<float>(), t.view().numel(), 0.25f);
          return t;
        };
        const Tensor q = input(s.heads), k = input(s.kv_heads), v = input(s.kv_heads);
        const Tensor o = input(s.heads);
        layer->run(q, k, v, o, Stream::cpu());
        mine.calls_ran = cpu::communication_calls();
        // What a model does next (the next layer's collective): a rank whose part of the plan
        // no longer needed the victim (a ring step already past it) finishes run() correctly
        // and meets the fault here.
        ctx.world->barrier(ctx.stream);
      } catch (const Error& e) {
        mine.failed = true;
        mine.code = e.code();
        mine.message = e.what();
        mine.stopped_ms = ms_since(start);
        throw;
      }
      mine.stopped_ms = ms_since(start);
    });
  } catch (const Error& e) {
    out.threw = true;
    out.code = e.code();
    out.message = e.what();
  }
  out.total_ms = ms_since(start);
  return out;
}

struct MethodCase {
  Method method;
  CommMode comm;
};

// Two- and one-sided methods, collectives (Ulysses' all-to-all), point-to-point (ring),
// signals and signal barriers (one-sided), and a 2-D mesh.
const MethodCase kMethods[] = {
    {Method::kRing, CommMode::kTwoSided},    {Method::kRing, CommMode::kOneSided},
    {Method::kUlysses, CommMode::kTwoSided}, {Method::kUsp, CommMode::kTwoSided},
    {Method::kTorus, CommMode::kOneSided},   {Method::kMesh, CommMode::kTwoSided}};

std::string case_name(const MethodCase& m) {
  return str(method_name(m.method), " ", comm_mode_name(m.comm));
}

// The victim's communication call halfway through its run() (from a clean run).
int64_t mid_run_call(const MethodCase& m) {
  const Outcome clean = run_layer([&](int) { return request_for(m.method, m.comm); });
  EXPECT_FALSE(clean.threw) << case_name(m) << ": " << clean.message;
  const RankOutcome& v = clean.ranks[kVictim];
  EXPECT_GT(v.calls_ran, v.calls_created) << case_name(m) << ": run() communicates nothing";
  return v.calls_created + (v.calls_ran - v.calls_created + 1) / 2;
}

TEST(SpFault, RankDyingMidRunStopsEveryOtherRankWithPeerFailure) {
  // A long timeout: the others must stop because the victim failed, not because time ran out.
  ScopedWaitTimeout timeout(30000);
  for (const MethodCase& m : kMethods) {
    SCOPED_TRACE(case_name(m));
    const int64_t call = mid_run_call(m);
    ScopedCpuFault fault(str("die:", kVictim, ":", call));
    const Outcome out = run_layer([&](int) { return request_for(m.method, m.comm); });
    ASSERT_TRUE(out.threw);
    EXPECT_EQ(out.code, ErrorCode::kSystem) << out.message;
    EXPECT_NE(out.message.find(str("rank ", kVictim, ": injected fault")), std::string::npos)
        << out.message;
    EXPECT_EQ(out.ranks[kVictim].calls_ran, -1) << "the victim finished its run";
    int failed_in_run = 0;
    for (int r = 0; r < kRanks; ++r) {
      if (r == kVictim) continue;
      const RankOutcome& o = out.ranks[size_t(r)];
      ASSERT_TRUE(o.failed) << "rank " << r << " finished without rank " << kVictim;
      EXPECT_EQ(o.code, ErrorCode::kPeerFailure) << o.message;
      // "... for rank X: rank X failed: <X's error>": X is whom it waited for; the chain ends
      // at the victim's error.
      EXPECT_NE(o.message.find(" failed: "), std::string::npos) << o.message;
      EXPECT_NE(o.message.find("injected fault"), std::string::npos) << o.message;
      EXPECT_LT(o.stopped_ms, 10000) << o.message;
      failed_in_run += o.calls_ran < 0;
    }
    EXPECT_GE(failed_in_run, 1) << "no rank needed the victim after its death: not mid-run";
  }
}

TEST(SpFault, RankStallingMidRunTimesOutTheOthersNamingIt) {
  constexpr int64_t kTimeoutMs = 1000;
  ScopedWaitTimeout timeout(kTimeoutMs);
  for (const MethodCase& m : kMethods) {
    SCOPED_TRACE(case_name(m));
    const int64_t call = mid_run_call(m);
    ScopedCpuFault fault(str("stall:", kVictim, ":", call));
    const Outcome out = run_layer([&](int) { return request_for(m.method, m.comm); });
    ASSERT_TRUE(out.threw);
    int named_the_victim = 0;
    for (int r = 0; r < kRanks; ++r) {
      if (r == kVictim) continue;
      const RankOutcome& o = out.ranks[size_t(r)];
      ASSERT_TRUE(o.failed) << "rank " << r << " finished without rank " << kVictim;
      EXPECT_TRUE(o.code == ErrorCode::kTimeout || o.code == ErrorCode::kPeerFailure) << o.message;
      // Within the timeout of its wait (plus scheduling, sanitizers included).
      EXPECT_LT(o.stopped_ms, kTimeoutMs + 4000) << o.message;
      // "... for rank 2 that never arrived", "recv #3 from rank 2", "waiting for rank 2".
      if (o.code == ErrorCode::kTimeout) {
        named_the_victim += o.message.find(str("for rank ", kVictim)) != std::string::npos ||
                            o.message.find(str("from rank ", kVictim)) != std::string::npos;
      }
    }
    EXPECT_GE(named_the_victim, 1) << out.message;
    // The victim wakes after twice the timeout, finds the others gone and stops too.
    EXPECT_TRUE(out.ranks[kVictim].failed);
    EXPECT_LT(out.total_ms, 2 * kTimeoutMs + 6000);
  }
}

// One rank creates a different plan: every rank fails at create() naming a rank whose plan
// differs (the victim names rank 0, the others the victim), before any data moves.
TEST(SpFault, RankWithDifferentPlanFailsEveryRankAtCreate) {
  ScopedWaitTimeout timeout(30000);
  const PlanRequest base = request_for(Method::kRing, CommMode::kTwoSided);
  struct Variant {
    const char* what;
    std::function<void(PlanRequest&)> change;
  };
  const Variant variants[] = {
      {"longer sequence", [](PlanRequest& r) { r.seq_len += 1; }},
      {"other head count", [](PlanRequest& r) { r.heads = 8; }},
      {"other method", [](PlanRequest& r) { r.options.method = Method::kUlysses; }},
      {"one-sided", [](PlanRequest& r) { r.options.comm = CommMode::kOneSided; }},
  };
  for (const Variant& variant : variants) {
    SCOPED_TRACE(variant.what);
    const Outcome out = run_layer([&](int rank) {
      PlanRequest r = base;
      if (rank == kVictim) variant.change(r);
      return r;
    });
    ASSERT_TRUE(out.threw);
    EXPECT_EQ(out.code, ErrorCode::kInvalidArgument) << out.message;
    for (int r = 0; r < kRanks; ++r) {
      const RankOutcome& o = out.ranks[size_t(r)];
      ASSERT_TRUE(o.failed) << "rank " << r;
      EXPECT_EQ(o.calls_created, -1) << "rank " << r << " created its layer";
      EXPECT_EQ(o.code, ErrorCode::kInvalidArgument) << o.message;
      const int differing = r == kVictim ? 0 : kVictim;
      EXPECT_NE(o.message.find(str("rank ", differing, " planned a different")), std::string::npos)
          << o.message;
    }
  }
}

// The victim's planner refuses its (different) request: it fails before the plan check and
// the others stop with kPeerFailure naming it, without waiting out the timeout.
TEST(SpFault, RankWhosePlanIsRefusedStopsTheOthers) {
  ScopedWaitTimeout timeout(30000);
  const Outcome out = run_layer([&](int rank) {
    PlanRequest r = request_for(Method::kRing, CommMode::kTwoSided);
    if (rank == kVictim) {
      r.options.method = Method::kUlysses;
      r.heads = r.kv_heads = 2;  // fewer query heads than ranks: Ulysses refuses
    }
    return r;
  });
  ASSERT_TRUE(out.threw);
  EXPECT_EQ(out.code, ErrorCode::kUnsupported) << out.message;
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    const RankOutcome& o = out.ranks[size_t(r)];
    ASSERT_TRUE(o.failed) << "rank " << r;
    EXPECT_EQ(o.code, ErrorCode::kPeerFailure) << o.message;
    EXPECT_NE(o.message.find(str("rank ", kVictim, " failed")), std::string::npos) << o.message;
    EXPECT_LT(o.stopped_ms, 10000) << o.message;
  }
}

TEST(SpFault, BadFaultSpecIsRefusedBeforeAnyRankStarts) {
  for (const char* spec : {"explode:1:1", "die:4:1", "die:1:0", "stall:1", "die:-1:3"}) {
    ScopedCpuFault fault(spec);
    bool ran = false;
    testing::expect_error(
        [&] { run_cpu_ranks(4, 1, context_options(), [&](RankContext&) { ran = true; }); },
        ErrorCode::kInvalidArgument,
        {str("TESSERA_CPU_FAULT = '", spec, "': expected <die|stall>:<rank>:<call>")});
    EXPECT_FALSE(ran) << spec;
  }
}

}  // namespace
}  // namespace tessera::sp
