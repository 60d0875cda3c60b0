// The sim executor and `auto`: simulated times are plausible (a single rank is its attention
// time, compute-bound plans are the compute, communication-bound plans at least bytes over
// bandwidth), monotone (more bandwidth or faster attention is never slower), and auto picks
// the candidate the cost model says is fastest and explains why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/sp/sim.h"
#include "tessera/sp/validator.h"
#include "unit/sp_test_util.h"

namespace tessera::sp {
namespace {

using testing::gpu_topology;
using testing::request;

TEST(SpSim, CostModelTerms) {
  CostModel m;
  EXPECT_DOUBLE_EQ(m.transfer_us(LinkClass::kNVLink, 0), m.nvlink.latency_us);
  // 300 MB at 300 GB/s: 1 ms.
  EXPECT_NEAR(m.transfer_us(LinkClass::kNVLink, 300'000'000), m.nvlink.latency_us + 1000.0, 1e-6);
  AttentionShape s;
  s.batch = 1;
  s.heads = 24;
  s.kv_heads = 24;
  s.head_dim = 128;
  // A large block runs near peak: 4 * 24 * 8192^2 * 128 flop at 620 TFLOP/s ~ 1330 us.
  const double at_peak = 4.0 * 24 * 8192.0 * 8192.0 * 128 / 620e6;
  const double big = m.attention_us(s, 24, 8192, 8192, 8192LL * 8192);
  EXPECT_GT(big, at_peak);
  EXPECT_LT(big, at_peak * 1.1);
  // Small blocks run below peak: 64x smaller work takes more than 1/64 of the time.
  const double small = m.attention_us(s, 24, 1024, 1024, 1024LL * 1024);
  EXPECT_GT(small, big / 64);
  EXPECT_EQ(visible_pairs({0, 1, 4}, {0, 1, 4}, true), 10);
  EXPECT_EQ(visible_pairs({4, 1, 4}, {0, 1, 4}, true), 16);
  EXPECT_EQ(visible_pairs({0, 2, 3}, {1, 2, 3}, true), 3);  // q 0 2 4, kv 1 3 5
  EXPECT_EQ(visible_pairs({0, 1, 3}, {5, 1, 2}, false), 6);
  m.nvlink.bandwidth_gbps = 0;
  EXPECT_THROW(m.validate(), Error);
  CostModel c;
  c.apply("network_gbps=12.5, attn_tflops_d128=700,num_sms=78");
  EXPECT_DOUBLE_EQ(c.network.bandwidth_gbps, 12.5);
  EXPECT_DOUBLE_EQ(c.emulated_network.bandwidth_gbps, 12.5);
  EXPECT_DOUBLE_EQ(c.attn_tflops_d128, 700);
  EXPECT_EQ(c.num_sms, 78);
  // Two-sided traffic between emulated machines has its own (measured) cost; one-sided traffic
  // and real networks take the link's.
  c.apply("emulated_two_sided_gbps=2.5,emulated_two_sided_us=40");
  EXPECT_NEAR(c.transfer_us(LinkClass::kEmulatedNetwork, 2'500'000, CommMode::kTwoSided),
              40.0 + 1000.0, 1e-6);
  EXPECT_NEAR(c.transfer_us(LinkClass::kEmulatedNetwork, 2'500'000, CommMode::kOneSided),
              c.emulated_network.latency_us + 2'500'000 / (12.5 * 1e3), 1e-6);
  EXPECT_DOUBLE_EQ(c.link(LinkClass::kNetwork, CommMode::kTwoSided).bandwidth_gbps, 12.5);
  EXPECT_THROW(c.apply("emulated_two_sided_gbps=0"), Error);
  try {
    c.apply("nvlink_gbs=1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nvlink_gbs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.apply("nvlink_gbps=fast"), Error);
  EXPECT_THROW(c.apply("nvlink_gbps=-1"), Error);
}

TEST(SpSim, VisiblePairsMatchesCounting) {
  // The closed form against counting, over runs of every start, stride and length up to 12.
  int checked = 0;
  for (int64_t qs = 0; qs < 12; qs += 3) {
    for (int64_t qd = 1; qd <= 4; ++qd) {
      for (int64_t qn = 0; qn <= 12; qn += 4) {
        for (int64_t ks = 0; ks < 12; ks += 2) {
          for (int64_t kd = 1; kd <= 5; kd += 2) {
            for (int64_t kn = 1; kn <= 9; kn += 4) {
              const TokenRun q{qs, qd, qn};
              const TokenRun k{ks, kd, kn};
              int64_t count = 0;
              for (int64_t i = 0; i < qn; ++i) {
                for (int64_t j = 0; j < kn; ++j) count += k.at(j) <= q.at(i);
              }
              ASSERT_EQ(visible_pairs(q, k, true), count) << q.to_string() << " " << k.to_string();
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(SpSim, SingleRankIsItsAttention) {
  const CostModel m;
  const PlanRequest req = request(gpu_topology(1, 1), Method::kRing, 4096, 8, 8, false, 0, 128);
  const Plan plan = plan_ring(req);
  const SimResult sim = simulate(plan, m);
  const double attention = m.attention_us(req.shape(), 8, 4096, 4096, 4096LL * 4096);
  EXPECT_GE(sim.total_us, attention);
  EXPECT_LT(sim.total_us, attention + 3 * m.launch_us + 10.0);
  EXPECT_NEAR(sim.exposed_us(), 0.0, 1e-9);
  ASSERT_EQ(sim.timeline.size(), plan.ranks[0].steps.size());
  EXPECT_NE(sim.to_json().find("\"timeline\""), std::string::npos);
}

TEST(SpSim, RingIsComputeBoundOnFastLinksAndBandwidthBoundOnSlowOnes) {
  const PlanRequest req = request(gpu_topology(1, 4), Method::kRing, 16384, 8, 8, false, 0, 128);
  const Plan plan = plan_ring(req);
  CostModel fast;
  fast.nvlink = {1e6, 0.0};
  fast.two_sided_step_us = 0.0;
  fast.two_sided_compute_slowdown = 0.0;
  const SimResult f = simulate(plan, fast);
  double compute = 0;
  for (double c : f.compute_us) compute = std::max(compute, c);
  EXPECT_LT(f.total_us, compute * 1.02) << "ring on infinitely fast links is its compute";
  CostModel slow = fast;
  slow.nvlink = {1.0, 0.0};  // 1 GB/s
  const SimResult s = simulate(plan, slow);
  // Every rank receives 3 KV chunks in turn: at least that many bytes at 1 GB/s.
  const double bound_us = double(bytes_received(plan, 0)) / 1e3;
  EXPECT_GE(s.total_us, bound_us);
  EXPECT_LT(s.total_us, bound_us + compute * 1.5);
}

// The cost model with every rate multiplied by f and every fixed time divided by f.
CostModel scaled(CostModel m, double f) {
  for (LinkClass l : {LinkClass::kSelf, LinkClass::kNVLink, LinkClass::kPCIe, LinkClass::kNetwork,
                      LinkClass::kEmulatedNetwork}) {
    m.link(l).bandwidth_gbps *= f;
    m.link(l).latency_us /= f;
  }
  m.emulated_two_sided.bandwidth_gbps *= f;
  m.emulated_two_sided.latency_us /= f;
  m.attn_tflops_d64 *= f;
  m.attn_tflops_d128 *= f;
  m.hbm_gbps *= f;
  m.launch_us /= f;
  m.two_sided_step_us /= f;
  m.one_sided_step_us /= f;
  return m;
}

// Every method on 2 machines x 4 GPUs: more bandwidth (either class) or faster attention
// never makes a plan slower, and doubling everything's speed halves the time.
//
// Except ring one-sided, which pulls each KV block from its owner: when one link class or the
// attention gets faster, the ranks whose pulls stay on NVLink run ahead and pull from the same
// owner as a rank still on the slower link, which then shares that owner's NIC (a list
// scheduling anomaly; the emulated NICs share a link the same way). Its time may rise a few
// percent; it still scales exactly.
TEST(SpSim, MonotoneInBandwidthAndCompute) {
  const Topology topo = gpu_topology(2, 4);
  for (Method method : {Method::kRing, Method::kUlysses, Method::kUsp, Method::kTas, Method::kTorus,
                        Method::kMesh}) {
    for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
      if (method == Method::kMesh && comm == CommMode::kOneSided) continue;
      for (bool causal : {false, true}) {
        PlanRequest req = request(topo, method, 8192, 8, 2, causal, 64, 128);
        req.options.comm = comm;
        const CostModel base = CostModel::for_topology(topo);
        const Plan plan = make_plan(req, base);
        const double t0 = simulate(plan, base).total_us;
        EXPECT_GT(t0, 0.0);
        EXPECT_NEAR(simulate(plan, scaled(base, 2.0)).total_us, t0 / 2, t0 * 1e-9)
            << method_name(method) << " " << comm_mode_name(comm) << " scaled x2";
        const bool anomalies = method == Method::kRing && comm == CommMode::kOneSided;
        if (anomalies) continue;
        for (double factor : {1.5, 2.0, 4.0}) {
          CostModel net = base;
          net.network.bandwidth_gbps *= factor;
          CostModel nvl = base;
          nvl.nvlink.bandwidth_gbps *= factor;
          CostModel flops = base;
          flops.attn_tflops_d64 *= factor;
          flops.attn_tflops_d128 *= factor;
          const std::string what = str(method_name(method), " ", comm_mode_name(comm),
                                       causal ? " causal" : "", " x", factor);
          EXPECT_LE(simulate(plan, net).total_us, t0 * (1 + 1e-9)) << what << " network";
          EXPECT_LE(simulate(plan, nvl).total_us, t0 * (1 + 1e-9)) << what << " nvlink";
          EXPECT_LE(simulate(plan, flops).total_us, t0 * (1 + 1e-9)) << what << " attention";
        }
      }
    }
  }
}

// A one-sided step moves its transfers one after another. In every phase of the steps that
// all ranks run at once, no two ranks may reach the same peer across machines (they would
// queue on that peer's NIC): the plans rotate the peer order per rank.
TEST(SpSim, OneSidedStepsRotateTheirPeers) {
  struct Case {
    int machines, per_machine;
    Method method;
  };
  for (const Case& c :
       {Case{4, 1, Method::kUlysses}, Case{2, 2, Method::kTorus}, Case{2, 2, Method::kUlysses},
        Case{2, 4, Method::kTas}, Case{8, 1, Method::kUlysses}}) {
    const Topology topo = gpu_topology(c.machines, c.per_machine, 2.0, 15.0);
    PlanRequest req = request(topo, c.method, 4096, 8, 8, false, 64, 64);
    req.options.comm = CommMode::kOneSided;
    const Plan plan = make_plan(req, CostModel::for_topology(topo));
    const std::string what = str(method_name(c.method), " ", c.machines, "x", c.per_machine);
    // phases[i][r]: the cross-machine peers of rank r's i-th one-sided step, in order.
    std::vector<std::vector<std::vector<int>>> phases;
    for (int r = 0; r < plan.world_size; ++r) {
      int i = 0;
      for (const Step& step : plan.ranks[size_t(r)].steps) {
        if (!is_one_sided_step(step.kind)) continue;
        std::vector<int> peers;
        for (const Transfer& t : step.transfers) {
          const int peer = t.src_rank == r ? t.dst_rank : t.src_rank;
          if (plan.machine_of_rank[size_t(peer)] == plan.machine_of_rank[size_t(r)]) continue;
          if (peers.empty() || peers.back() != peer) peers.push_back(peer);
        }
        if (size_t(i) == phases.size()) phases.emplace_back(size_t(plan.world_size));
        phases[size_t(i++)][size_t(r)] = peers;
      }
    }
    ASSERT_FALSE(phases.empty()) << what;
    for (size_t i = 0; i < phases.size(); ++i) {
      for (size_t k = 0;; ++k) {
        std::vector<int> met;
        for (const std::vector<int>& peers : phases[i]) {
          if (k < peers.size()) met.push_back(peers[k]);
        }
        if (met.empty()) break;
        std::sort(met.begin(), met.end());
        EXPECT_EQ(std::adjacent_find(met.begin(), met.end()), met.end())
            << what << ": one-sided step " << i << " phase " << k << " has two ranks on one peer";
      }
    }
  }
}

// With rotated peers, one-sided Ulysses on 4 machines of one GPU is held only by the link: each
// GPU's ingress takes its 3 peers' blocks of Q, K, V (and its egress the O blocks) at 2 GB/s.
TEST(SpSim, OneSidedAllToAllRunsAtTheLinkRate) {
  const Topology topo = gpu_topology(4, 1, 2.0, 15.0);
  PlanRequest req = request(topo, Method::kUlysses, 16384, 8, 8, false, 0, 64);
  req.options.comm = CommMode::kOneSided;
  const CostModel model = CostModel::for_topology(topo);
  const Plan plan = make_plan(req, model);
  const SimResult r = simulate(plan, model);
  const double link_bound_us = double(bytes_received(plan, 0)) / 2e3;
  double compute = 0;
  for (double c : r.compute_us) compute = std::max(compute, c);
  EXPECT_GE(r.total_us, link_bound_us);
  EXPECT_LT(r.total_us, (link_bound_us + compute) * 1.05);
}

// Attention slows down only while copies or NCCL run beside it: by at most the slowdown
// times the time they overlap it.
TEST(SpSim, InterferenceSlowsOnlyTheOverlappedCompute) {
  const Topology topo = gpu_topology(1, 4);
  for (CommMode comm : {CommMode::kOneSided, CommMode::kTwoSided}) {
    PlanRequest req = request(topo, Method::kRing, 16384, 8, 8, false, 64, 128);
    req.options.comm = comm;
    CostModel quiet = CostModel::for_topology(topo);
    quiet.one_sided_compute_slowdown = 0.0;
    quiet.two_sided_compute_slowdown = 0.0;
    const Plan plan = make_plan(req, quiet);
    const SimResult base = simulate(plan, quiet);
    CostModel noisy = quiet;
    (comm == CommMode::kOneSided ? noisy.one_sided_compute_slowdown
                                 : noisy.two_sided_compute_slowdown) = 0.5;
    const SimResult slowed = simulate(plan, noisy);
    double comm_us = 0.0;
    for (double c : slowed.comm_us) comm_us = std::max(comm_us, c);
    const std::string what(comm_mode_name(comm));
    EXPECT_GT(slowed.total_us, base.total_us) << what;
    EXPECT_LE(slowed.total_us, base.total_us + 0.5 * comm_us * (1 + 1e-9)) << what;
  }
}

TEST(SpSim, DeadlockedPlanIsReported) {
  // Both ranks receive before they send, in separate steps of one stream: a deadlock.
  Plan plan = plan_ring(request(gpu_topology(1, 2), Method::kRing, 8, 4, 4, false, 0));
  for (int r = 0; r < 2; ++r) {
    auto& steps = plan.ranks[r].steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].kind != StepKind::kSendRecv) continue;
      Step send = steps[i];
      std::erase_if(send.transfers, [&](const Transfer& t) { return t.src_rank != r; });
      std::erase_if(steps[i].transfers, [&](const Transfer& t) { return t.dst_rank != r; });
      for (Step& s : steps) {
        for (int& d : s.deps) d += d > int(i) ? 1 : 0;
      }
      send.deps = {int(i)};
      steps.insert(steps.begin() + i + 1, send);
      break;
    }
  }
  try {
    simulate(plan, CostModel());
    FAIL() << "a deadlocked plan simulated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks"), std::string::npos) << e.what();
  }
  // A transfer without its receiving side is refused up front.
  Plan broken = plan_ring(request(gpu_topology(1, 2), Method::kRing, 8, 4, 4, false, 0));
  for (Step& s : broken.ranks[1].steps) {
    if (s.kind == StepKind::kSendRecv)
      std::erase_if(s.transfers, [](const Transfer& t) { return t.dst_rank == 1; });
  }
  EXPECT_THROW(simulate(broken, CostModel()), Error);
}

TEST(SpSim, SyntheticTopologyLinks) {
  LinkSpec link;
  const Topology t = synthetic_topology(2, 3, link);
  EXPECT_EQ(t.world_size, 6);
  EXPECT_EQ(t.link(0, 2), LinkClass::kNVLink);
  EXPECT_EQ(t.link(2, 3), LinkClass::kNetwork);
  EXPECT_EQ(t.link(4, 4), LinkClass::kSelf);
  EXPECT_EQ(t.machine_of_rank[5], 1);
  EXPECT_EQ(t.local_rank[5], 2);
  EXPECT_THROW(synthetic_topology(0, 2, link), Error);
}

TEST(SpAuto, PicksTheFastestCandidateAndSaysWhy) {
  const Topology topo = gpu_topology(4, 2, 6.0, 15.0);
  const CostModel model = CostModel::for_topology(topo);
  PlanRequest req = request(topo, Method::kAuto, 16384, 24, 24, false, 128, 128);
  const AutoChoice choice = plan_auto(req, model);
  EXPECT_TRUE(validate_plan(choice.plan).ok());
  ASSERT_FALSE(choice.candidates.empty());
  ASSERT_TRUE(choice.candidates[0].feasible);
  const double best = choice.candidates[0].sim_us;
  EXPECT_NEAR(simulate(choice.plan, model).total_us, best, 1e-6 * best);
  for (const AutoCandidate& c : choice.candidates) {
    if (c.feasible) {
      EXPECT_GE(c.sim_us, best);
    } else {
      EXPECT_FALSE(c.reason.empty()) << c.label;
    }
  }
  EXPECT_NE(choice.explanation.find("auto picked"), std::string::npos);
  EXPECT_NE(choice.explanation.find("cost model"), std::string::npos);
  EXPECT_NE(choice.explanation.find(choice.candidates[0].label), std::string::npos);
  // On a slow network the winner moves less across machines than plain ring attention.
  int64_t ring_cross = -1;
  for (const AutoCandidate& c : choice.candidates) {
    if (c.feasible && c.label.rfind("ring two-sided", 0) == 0)
      ring_cross = c.cross_machine_bytes_in;
  }
  ASSERT_GT(ring_cross, 0);
  EXPECT_LT(choice.candidates[0].cross_machine_bytes_in, ring_cross);
  // make_plan with method auto returns the same plan.
  EXPECT_EQ(to_json(make_plan(req, model)).size(), to_json(choice.plan).size());
}

TEST(SpAuto, ListsInapplicableMethods) {
  // 6 heads on 8 ranks: Ulysses cannot give every rank a head.
  const Topology topo = gpu_topology(2, 4);
  const AutoChoice choice = plan_auto(request(topo, Method::kAuto, 2048, 6, 6, true, 0, 64),
                                      CostModel::for_topology(topo));
  bool ulysses_refused = false;
  for (const AutoCandidate& c : choice.candidates) {
    ulysses_refused |= c.label.rfind("ulysses", 0) == 0 && !c.feasible &&
                       c.reason.find("exceeds heads") != std::string::npos;
  }
  EXPECT_TRUE(ulysses_refused) << choice.explanation;
  EXPECT_NE(choice.explanation.find("not applicable"), std::string::npos);
}

}  // namespace
}  // namespace tessera::sp
