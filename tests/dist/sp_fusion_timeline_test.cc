// Compute-step fusion (src/sp/executor_fusion.h) and the per-step timeline of a run.
//   - For every planner on 1x4, 2x2 and 4x1 with and without joint tokens, every rank's compute
//     steps land in exactly one launch each, every KV operand is folded exactly once, launches
//     stay within the kernel's job and chunk limits, and no launch holds two jobs writing
//     overlapping state.
//   - Ring on 1x4 with joint tokens issues one launch per ring step (the image and joint queries
//     as two jobs, the joint keys folded into the first step's job): 4 instead of 10.
//   - The timeline of a cpu run: every step has 0 <= start <= end, starts after each of its
//     deps ended, and fused steps share their launch's interval. (Correctness of fused runs is
//     what sp_executor_test checks for every method.)
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
              rp, actions[size_t(r)], attn::kMaxJobsPerLaunch, attn::kMaxChunksPerLaunch);
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
  const ComputeLaunches f = fuse_compute_steps(plan.ranks[0], actions[0], attn::kMaxJobsPerLaunch,
                                               attn::kMaxChunksPerLaunch);
  ASSERT_EQ(f.launches.size(), 4u);
  for (const auto& launch : f.launches) EXPECT_EQ(launch.jobs.size(), 2u);  // image, joint Q
  // The first ring step folds the joint keys and the rank's own keys in one job each.
  EXPECT_EQ(f.launches[0].jobs[0].chunks.size(), 2u);
  EXPECT_EQ(f.launches[0].jobs[1].chunks.size(), 2u);
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
