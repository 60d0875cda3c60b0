// Compute-step fusion (src/sp/executor_fusion.h) and the per-step timeline of a run.
//   - For every planner on 1x4, 2x2 and 4x1 with and without joint tokens, every rank's compute
//     steps land in exactly one launch each, every KV operand is folded exactly once, launches
//     stay within the kernel's job and chunk limits, and no launch holds two jobs writing
//     overlapping state.
//   - Ring on 1x4 with joint tokens issues one launch per ring step (the image and joint queries
//     as two jobs, the joint keys folded into the first step's job): 4 instead of 10.
//   - Folded finalizes: for every planner (two- and one-sided) each folded finalize belongs to
//     one job of a launch issued before it on its stream that writes its state, and no step
//     between them touches its state or output, nor any later step reads the state; Ring on
//     1x4 with joint tokens folds every finalize. Hand-made plans where folding must be
//     refused (a write or read of the state in between, a later read, a finalize on another
//     stream, another rank getting the state) and allowed (a later overwrite, another rank
//     getting the output). The sim charges nothing for a folded finalize.
//   - The timeline of a cpu run: every step has 0 <= start <= end, starts after each of its
//     deps ended, and fused steps share their launch's interval. (Correctness of fused runs,
//     folded finalizes included, is what sp_executor_test checks for every method.)
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "../../src/sp/executor_fusion.h"
#include "../../src/sp/executor_schedule.h"
#include "tessera/attn/attention.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/sp/attention_layer.h"
#include "tessera/sp/cost_model.h"
#include "tessera/sp/planners.h"
#include "tessera/sp/sim.h"

namespace tessera::sp {
namespace {

using detail::ComputeLaunches;
using detail::fuse_compute_steps;
using detail::FusedJob;
using detail::schedule_plan;
using detail::ScheduledAction;

PlanRequest request(int machines, int per_machine, Method method, int64_t joint) {
  PlanRequest r;
  r.seq_len = 4096;
  r.heads = 8;
  r.kv_heads = 8;
  r.head_dim = 64;
  r.joint_tokens = joint;
  r.topology = synthetic_topology(machines, per_machine, LinkSpec{});
  r.options.method = method;
  return r;
}

TEST(SpFusion, EveryComputeStepInExactlyOneLaunch) {
  int planned = 0;
  for (Method method : {Method::kRing, Method::kUlysses, Method::kUsp, Method::kTas, Method::kTorus,
                        Method::kMesh}) {
    for (const auto& [machines, per_machine] :
         {std::pair{1, 4}, std::pair{2, 2}, std::pair{4, 1}}) {
      for (int64_t joint : {int64_t(0), int64_t(64)}) {
        const PlanRequest req = request(machines, per_machine, method, joint);
        Plan plan;
        try {
          plan = make_plan(req, CostModel::for_topology(req.topology));
        } catch (const Error& e) {
          ASSERT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
          continue;
        }
        ++planned;
        const auto actions = schedule_plan(plan);
        for (int r = 0; r < plan.world_size; ++r) {
          SCOPED_TRACE(
              str(method_name(method), " ", machines, "x", per_machine, " J", joint, " rank ", r));
          const RankPlan& rp = plan.ranks[size_t(r)];
          const ComputeLaunches f = fuse_compute_steps(
              plan, r, actions[size_t(r)], attn::kMaxJobsPerLaunch, attn::kMaxChunksPerLaunch);
          std::map<int, int> seen_steps;
          std::set<std::pair<int, int>> folded;
          for (int l = 0; l < int(f.launches.size()); ++l) {
            const auto& launch = f.launches[size_t(l)];
            EXPECT_LE(int(launch.jobs.size()), attn::kMaxJobsPerLaunch);
            int chunks = 0;
            for (const FusedJob& job : launch.jobs) {
              chunks += int(job.chunks.size());
              for (const auto& ch : job.chunks) EXPECT_TRUE(folded.insert(ch).second);
            }
            EXPECT_LE(chunks, attn::kMaxChunksPerLaunch);
            for (int s : launch.steps) {
              EXPECT_EQ(f.launch_of_step[size_t(s)], l);
              ++seen_steps[s];
            }
            for (size_t a = 0; a < launch.jobs.size(); ++a) {
              for (size_t b = a + 1; b < launch.jobs.size(); ++b) {
                const SlotRef& sa = rp.steps[size_t(launch.jobs[a].first_step)].compute.state;
                const SlotRef& sb = rp.steps[size_t(launch.jobs[b].first_step)].compute.state;
                EXPECT_FALSE(sa.slot == sb.slot && sa.region.overlaps(sb.region));
              }
            }
          }
          size_t operands = 0;
          for (int s = 0; s < int(rp.steps.size()); ++s) {
            if (rp.steps[size_t(s)].kind != StepKind::kCompute) {
              EXPECT_EQ(f.launch_of_step[size_t(s)], -1);
              continue;
            }
            EXPECT_EQ(seen_steps[s], 1) << "step " << s;
            operands += rp.steps[size_t(s)].compute.kv.size();
          }
          EXPECT_EQ(folded.size(), operands);
        }
      }
    }
  }
  EXPECT_GE(planned, 30);  // of 36: Torus refuses layouts it cannot tile
}

TEST(SpFusion, RingWithJointTokensIsOneLaunchPerRingStep) {
  PlanRequest req = request(1, 4, Method::kRing, 512);
  const Plan plan = make_plan(req, CostModel::for_topology(req.topology));
  const auto actions = schedule_plan(plan);
  const ComputeLaunches f =
      fuse_compute_steps(plan, 0, actions[0], attn::kMaxJobsPerLaunch, attn::kMaxChunksPerLaunch);
  ASSERT_EQ(f.launches.size(), 4u);
  for (const auto& launch : f.launches) EXPECT_EQ(launch.jobs.size(), 2u);  // image, joint Q
  // The first ring step folds the joint keys and the rank's own keys in one job each.
  EXPECT_EQ(f.launches[0].jobs[0].chunks.size(), 2u);
  EXPECT_EQ(f.launches[0].jobs[1].chunks.size(), 2u);
}

bool overlaps(const SlotRef& a, const SlotRef& b) {
  return a.slot == b.slot && a.region.overlaps(b.region);
}
bool same_ref(const SlotRef& a, const SlotRef& b) {
  return a.slot == b.slot && a.region.row_begin == b.region.row_begin &&
         a.region.row_count == b.region.row_count && a.region.head_begin == b.region.head_begin &&
         a.region.head_count == b.region.head_count;
}

// Whether `step` (of `rank`) reads or writes `ref` on this rank.
bool reads(const Step& step, int rank, const SlotRef& ref) {
  switch (step.kind) {
    case StepKind::kCompute: {
      bool r = overlaps(step.compute.q.ref, ref) ||
               (step.compute.accumulate && overlaps(step.compute.state, ref));
      for (const AttnOperand& kv : step.compute.kv) r = r || overlaps(kv.ref, ref);
      return r;
    }
    case StepKind::kMerge:
      return overlaps(step.src, ref) || (!step.overwrite && overlaps(step.dst, ref));
    case StepKind::kFinalize:
      return overlaps(step.src, ref);
    default:
      for (const Transfer& t : step.transfers)
        if (t.src_rank == rank && overlaps(t.src, ref)) return true;
      return false;
  }
}
bool writes(const Step& step, int rank, const SlotRef& ref) {
  switch (step.kind) {
    case StepKind::kCompute:
      return overlaps(step.compute.state, ref);
    case StepKind::kMerge:
    case StepKind::kFinalize:
      return overlaps(step.dst, ref);
    default:
      for (const Transfer& t : step.transfers)
        if (t.dst_rank == rank && overlaps(t.dst, ref)) return true;
      return false;
  }
}

// Checks every folded finalize of one rank against the rules that make it invisible (in
// schedule order, which the plan's order implies on one stream); returns how many were folded.
int check_folded_finalizes(const Plan& plan, int rank, const std::vector<ScheduledAction>& actions,
                           const ComputeLaunches& f) {
  const RankPlan& rp = plan.ranks[size_t(rank)];
  std::vector<int> pos(rp.steps.size(), -1);
  for (int p = 0; p < int(actions.size()); ++p)
    if (!actions[size_t(p)].end) pos[size_t(actions[size_t(p)].step)] = p;
  int folded = 0;
  EXPECT_EQ(f.finalize_folded_into.size(), rp.steps.size());
  for (int s = 0; s < int(rp.steps.size()); ++s) {
    const int l = f.finalize_folded_into[size_t(s)];
    if (l < 0) continue;
    ++folded;
    const Step& fin = rp.steps[size_t(s)];
    SCOPED_TRACE(str("finalize step ", s, " folded into launch ", l));
    EXPECT_EQ(fin.kind, StepKind::kFinalize);
    const auto& launch = f.launches[size_t(l)];
    int owners = 0;
    for (const FusedJob& job : launch.jobs) {
      if (job.finalize_step != s) continue;
      ++owners;
      EXPECT_TRUE(same_ref(rp.steps[size_t(job.first_step)].compute.state, fin.src));
    }
    EXPECT_EQ(owners, 1);
    const int issue = launch.steps.back();
    EXPECT_EQ(rp.steps[size_t(issue)].stream, fin.stream);
    EXPECT_LT(pos[size_t(issue)], pos[size_t(s)]);
    for (int i = 0; i < int(rp.steps.size()); ++i) {
      if (i == s) continue;
      const Step& st = rp.steps[size_t(i)];
      if (pos[size_t(i)] > pos[size_t(s)]) {
        EXPECT_FALSE(reads(st, rank, fin.src)) << "step " << i << " reads the state after";
      } else if (pos[size_t(i)] > pos[size_t(issue)]) {
        EXPECT_FALSE(writes(st, rank, fin.src) || reads(st, rank, fin.dst) ||
                     writes(st, rank, fin.dst))
            << "step " << i << " between the launch and the finalize";
      }
    }
  }
  return folded;
}

TEST(SpFusion, FinalizesFoldIntoTheLaunchThatLastWritesTheirState) {
  std::map<Method, int> folded_by_method;
  for (Method method : {Method::kRing, Method::kUlysses, Method::kUsp, Method::kTas, Method::kTorus,
                        Method::kMesh}) {
    for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
      for (const auto& [machines, per_machine] : {std::pair{1, 4}, std::pair{2, 2}}) {
        for (int64_t joint : {int64_t(0), int64_t(64)}) {
          if (method == Method::kMesh && comm == CommMode::kOneSided) continue;  // two-sided only
          PlanRequest req = request(machines, per_machine, method, joint);
          req.options.comm = comm;
          Plan plan;
          try {
            plan = make_plan(req, CostModel::for_topology(req.topology));
          } catch (const Error& e) {
            ASSERT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
            continue;
          }
          const auto actions = schedule_plan(plan);
          int folded = 0, finalizes = 0;
          for (int r = 0; r < plan.world_size; ++r) {
            SCOPED_TRACE(str(method_name(method), " ", comm_mode_name(comm), " ", machines, "x",
                             per_machine, " J", joint, " rank ", r));
            const ComputeLaunches f = fuse_compute_steps(
                plan, r, actions[size_t(r)], attn::kMaxJobsPerLaunch, attn::kMaxChunksPerLaunch);
            const int rank_folded = check_folded_finalizes(plan, r, actions[size_t(r)], f);
            EXPECT_EQ(f.num_folded_finalizes(), rank_folded);
            folded += rank_folded;
            for (const Step& st : plan.ranks[size_t(r)].steps)
              finalizes += st.kind == StepKind::kFinalize;
            const ComputeLaunches unfolded =
                fuse_compute_steps(plan, r, actions[size_t(r)], attn::kMaxJobsPerLaunch,
                                   attn::kMaxChunksPerLaunch, false);
            EXPECT_EQ(unfolded.num_folded_finalizes(), 0);
            EXPECT_EQ(unfolded.launches.size(), f.launches.size());
          }
          // Ring's states are each written by one job of its last launch and read by nothing
          // but their finalize: every finalize folds. (Today every method but Mesh folds all;
          // Mesh finalizes its image rows after a merge, which no launch can absorb.)
          if (method == Method::kRing && machines == 1 && joint > 0) {
            EXPECT_EQ(folded, finalizes) << comm_mode_name(comm);
            EXPECT_EQ(finalizes, 2 * plan.world_size);  // image rows and joint rows per rank
          }
          folded_by_method[method] += folded;
        }
      }
    }
  }
  for (const auto& [method, folded] : folded_by_method)
    EXPECT_GT(folded, 0) << method_name(method) << " folds no finalize";
}

// ---- hand-made plans: when a finalize must not fold ---------------------------------------

// One rank (two for remote access): Q, KV (the caller's), two partial states, two outputs.
// Slots: 0 Q, 1 KV, 2 state, 3 output, 4 other state, 5 other output.
Plan tiny_plan(int world_size = 1) {
  Plan plan;
  plan.method = "test";
  plan.world_size = world_size;
  plan.num_streams = 2;
  plan.shape.seq_len = 8 * world_size;
  plan.shape.heads = plan.shape.kv_heads = 2;
  plan.shape.head_dim = 8;
  for (int r = 0; r < world_size; ++r) plan.machine_of_rank.push_back(0);
  for (int a = 0; a < world_size; ++a)
    for (int b = 0; b < world_size; ++b)
      plan.links.push_back(a == b ? LinkClass::kSelf : LinkClass::kNVLink);
  for (int r = 0; r < world_size; ++r) {
    RankPlan rp;
    rp.slots = {{"q", SlotKind::kQ, SlotBinding::kInputQ, 8, 2},
                {"kv", SlotKind::kKV, SlotBinding::kInputKV, 8, 2},
                {"state", SlotKind::kPartial, SlotBinding::kWorkspace, 8, 2},
                {"o", SlotKind::kO, SlotBinding::kOutput, 8, 2},
                {"other state", SlotKind::kPartial, SlotBinding::kWorkspace, 8, 2},
                {"other o", SlotKind::kO, SlotBinding::kWorkspace, 8, 2}};
    plan.ranks.push_back(rp);
  }
  return plan;
}

const Region kAll{0, 8, 0, 2};

Step compute_step(int state_slot, bool accumulate) {
  Step s;
  s.kind = StepKind::kCompute;
  s.compute.q = {{0, kAll}, {0, 1, 8}, 0};
  s.compute.kv = {{{1, kAll}, {0, 1, 8}, 0}};
  s.compute.state = {state_slot, kAll};
  s.compute.accumulate = accumulate;
  return s;
}
Step state_step(StepKind kind, int src, int dst, int stream = kComputeStream) {
  Step s;
  s.kind = kind;
  s.stream = stream;
  s.src = {src, kAll};
  s.dst = {dst, kAll};
  s.overwrite = kind == StepKind::kMerge;
  return s;
}

// The launch step `finalize` of rank 0 is folded into, -1 if none.
int folded_into(const Plan& plan, int finalize) {
  const auto actions = schedule_plan(plan);
  const ComputeLaunches f =
      fuse_compute_steps(plan, 0, actions[0], attn::kMaxJobsPerLaunch, attn::kMaxChunksPerLaunch);
  check_folded_finalizes(plan, 0, actions[0], f);
  return f.finalize_folded_into[size_t(finalize)];
}

TEST(SpFusion, FinalizeFoldsOnlyWhereNothingCanTell) {
  {  // compute, finalize: folds
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kFinalize, 2, 3)};
    EXPECT_EQ(folded_into(p, 1), 0);
  }
  {  // two launches write the state (a merge between them): the second absorbs the finalize
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kMerge, 4, 2),
                        compute_step(2, true), state_step(StepKind::kFinalize, 2, 3)};
    EXPECT_EQ(folded_into(p, 3), 1);
  }
  {  // a merge writes the state after the launch: the finalize must see it
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kMerge, 4, 2),
                        state_step(StepKind::kFinalize, 2, 3)};
    EXPECT_EQ(folded_into(p, 2), -1);
  }
  {  // a step between reads the state's O (the folded launch leaves it unspecified)
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kMerge, 2, 4),
                        state_step(StepKind::kFinalize, 2, 3)};
    EXPECT_EQ(folded_into(p, 2), -1);
  }
  {  // a step after the finalize reads the state
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kFinalize, 2, 3),
                        state_step(StepKind::kMerge, 2, 4)};
    EXPECT_EQ(folded_into(p, 1), -1);
  }
  {  // a step after the finalize starts a new state there (overwrites it without reading):
     // fine; a later read of the region, even of the new state, keeps the first one unfolded
     // (conservative), the second folds
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kFinalize, 2, 3),
                        compute_step(2, false)};
    EXPECT_EQ(folded_into(p, 1), 0);
    p.ranks[0].steps.push_back(state_step(StepKind::kFinalize, 2, 5));
    EXPECT_EQ(folded_into(p, 1), -1);
    EXPECT_EQ(folded_into(p, 3), 1);
  }
  {  // a step between writes the finalize's destination (the finalize must win)
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kFinalize, 4, 3),
                        state_step(StepKind::kFinalize, 2, 3)};
    EXPECT_EQ(folded_into(p, 2), -1);
  }
  {  // a finalize on another stream than the launch
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kFinalize, 2, 3, 1)};
    p.ranks[0].steps[1].deps = {0};
    EXPECT_EQ(folded_into(p, 1), -1);
  }
  {  // a destination that is not the state's rows: not folded
    Plan p = tiny_plan();
    p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kFinalize, 2, 3)};
    p.ranks[0].steps[1].dst.region = {0, 4, 0, 2};
    EXPECT_EQ(folded_into(p, 1), -1);
  }
}

TEST(SpFusion, FinalizeDoesNotFoldWhereAnotherRankReadsTheState) {
  // Rank 1 gets rank 0's state after a barrier that follows the finalize.
  Plan p = tiny_plan(2);
  Step barrier;
  barrier.kind = StepKind::kBarrier;
  barrier.group = {0, 1};
  p.ranks[0].steps = {compute_step(2, false), state_step(StepKind::kFinalize, 2, 3), barrier};
  Step get;
  get.kind = StepKind::kGet;
  get.stream = 1;
  get.deps = {0};
  get.transfers = {{0, 0, {2, kAll}, 1, {4, kAll}, LinkClass::kNVLink, 0}};
  p.ranks[1].steps = {barrier, get};
  EXPECT_EQ(folded_into(p, 1), -1);
  // Getting the finalized output instead is fine: nothing else writes it.
  p.ranks[1].steps[1].transfers[0].src.slot = 3;
  p.ranks[1].steps[1].transfers[0].dst.slot = 5;
  EXPECT_EQ(folded_into(p, 1), 0);
}

TEST(SpSim, FoldedFinalizesCostNothing) {
  PlanRequest req = request(1, 4, Method::kRing, 512);
  const Plan plan = make_plan(req, CostModel::for_topology(req.topology));
  const SimResult sim = simulate(plan, CostModel::for_topology(req.topology));
  int finalizes = 0;
  for (const SimStepTime& t : sim.timeline) {
    if (plan.ranks[size_t(t.rank)].steps[size_t(t.step)].kind != StepKind::kFinalize) continue;
    ++finalizes;
    EXPECT_EQ(t.end_us, t.start_us) << "rank " << t.rank << " step " << t.step;
  }
  EXPECT_EQ(finalizes, 8);
}

TEST(SpTimeline, StepsStartAfterTheirDepsAndFusedStepsShareAnInterval) {
  PlanRequest req;
  req.seq_len = 96;
  req.heads = req.kv_heads = 4;
  req.head_dim = 16;
  req.dtype = DType::kF32;
  req.joint_tokens = 8;
  ContextOptions opts;
  opts.heap_bytes = size_t(1) << 22;
  for (Method method : {Method::kRing, Method::kTorus}) {
    req.options.method = method;
    req.options.comm = method == Method::kTorus ? CommMode::kOneSided : CommMode::kTwoSided;
    run_cpu_ranks(4, 2, opts, [&](RankContext& ctx) {
      auto layer = SpAttention::create(ctx, req);
      const int64_t rows = layer->local_rows();
      auto tensor = [&](int64_t n) {
        Tensor t = Tensor::empty({1, n, 4, 16}, DType::kF32, Device::cpu());
        std::fill_n(t.data_as<float>(), t.view().numel(), 0.5f);
        return t;
      };
      const Tensor q = tensor(rows), k = tensor(rows), v = tensor(rows), o = tensor(rows);
      const Tensor jq = tensor(8), jk = tensor(8), jv = tensor(8), jo = tensor(8);
      layer->enable_timeline(true);
      layer->run(q, k, v, o, jq, jk, jv, jo, Stream::cpu());
      const std::vector<StepTiming> t = layer->last_timeline();
      const RankPlan& rp = layer->plan().ranks[size_t(ctx.rank)];
      ASSERT_EQ(t.size(), rp.steps.size());
      for (size_t i = 0; i < t.size(); ++i) {
        EXPECT_EQ(t[i].step, int(i));
        EXPECT_EQ(t[i].stream, rp.steps[i].stream);
        EXPECT_GE(t[i].start_us, 0.0);
        EXPECT_LE(t[i].start_us, t[i].end_us);
        for (int d : rp.steps[i].deps) {
          EXPECT_GE(t[i].start_us, t[size_t(d)].end_us)
              << method_name(method) << " rank " << ctx.rank << " step " << i << " dep " << d;
        }
      }
      EXPECT_LT(layer->compute_launches(),
                int(std::count_if(rp.steps.begin(), rp.steps.end(),
                                  [](const Step& s) { return s.kind == StepKind::kCompute; })));
    });
  }
}

}  // namespace
}  // namespace tessera::sp
