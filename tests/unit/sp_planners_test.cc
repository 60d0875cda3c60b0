// Every planner's plans pass the validator over 1..8 ranks on 1..4 machines, head counts that
// do and do not divide the degrees, GQA ratios 1, 4 and 8, causal and not, sequence lengths
// that P does not divide, with and without joint tokens, two-sided and one-sided.
#include <gtest/gtest.h>

#include <numeric>

#include "tessera/core/error.h"
#include "tessera/sp/validator.h"
#include "unit/sp_test_util.h"

namespace tessera::sp {
namespace {

using testing::gpu_topology;
using testing::head_cases;
using testing::request;
using testing::topology_cases;

// Sequence lengths: a few tokens per rank plus a remainder P does not divide.
std::vector<int64_t> seq_lens(int P) {
  return {int64_t(3 * P + (P > 1 ? P - 1 : 0)), 5};
}

struct SweepCounts {
  int planned = 0;
  int unsupported = 0;
};

// Plans `req` and validates the result; kUnsupported is allowed when `may_refuse`.
void plan_and_validate(const PlanRequest& req, bool may_refuse, SweepCounts& counts,
                       const CostModel& model) {
  const std::string what =
      str(method_name(req.options.method), " ", comm_mode_name(req.options.comm),
          " P=", req.topology.world_size, " machines=", req.topology.machine_of_rank.back() + 1,
          " L=", req.seq_len, " H=", req.heads, "/", req.kv_heads, " J=", req.joint_tokens,
          req.causal ? " causal" : "",
          req.options.layout ? str(" ", token_layout_name(*req.options.layout)) : "",
          req.options.ulysses_degree ? str(" Pu=", req.options.ulysses_degree) : "",
          req.options.mesh_rows ? str(" tile ", req.options.mesh_rows, "x", req.options.mesh_cols)
                                : "");
  Plan plan;
  try {
    plan = make_plan(req, model);
  } catch (const Error& e) {
    if (may_refuse && e.code() == ErrorCode::kUnsupported) {
      ++counts.unsupported;
      return;
    }
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  ++counts.planned;
  const ValidationReport report = validate_plan(plan);
  EXPECT_TRUE(report.ok()) << what << "\n" << report.to_string(8);
  EXPECT_GT(report.blocks_needed, 0) << what;
}

// Runs `configure` over every topology and shape case.
template <typename Configure>
SweepCounts sweep(Method method, const Configure& configure) {
  SweepCounts counts;
  const CostModel model;
  for (const auto& [P, N] : topology_cases()) {
    const Topology topo = gpu_topology(N, P / N);
    for (const auto& hc : head_cases()) {
      for (bool causal : {false, true}) {
        for (int64_t joint : {int64_t(0), int64_t(5)}) {
          for (int64_t L : seq_lens(P)) {
            PlanRequest req = request(topo, method, L, hc.heads, hc.kv_heads, causal, joint);
            configure(req, counts, model);
          }
        }
      }
    }
  }
  return counts;
}

TEST(SpPlanners, RingEveryLayoutAndCommMode) {
  const SweepCounts counts =
      sweep(Method::kRing, [](PlanRequest req, SweepCounts& c, const CostModel& model) {
        for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
          for (TokenLayout layout :
               {TokenLayout::kContiguous, TokenLayout::kStriped, TokenLayout::kZigzag}) {
            req.options.comm = comm;
            req.options.layout = layout;
            plan_and_validate(req, false, c, model);
          }
        }
      });
  EXPECT_EQ(counts.unsupported, 0);
  EXPECT_GT(counts.planned, 1000);
}

TEST(SpPlanners, UlyssesBothCommModes) {
  const SweepCounts counts =
      sweep(Method::kUlysses, [](PlanRequest req, SweepCounts& c, const CostModel& model) {
        for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
          req.options.comm = comm;
          const bool refuse = req.heads < req.topology.world_size;
          SweepCounts local;
          plan_and_validate(req, refuse, local, model);
          // Ulysses refuses exactly when a rank would get no query head.
          EXPECT_EQ(local.unsupported, refuse ? 1 : 0)
              << req.heads << " heads, P " << req.topology.world_size;
          c.planned += local.planned;
          c.unsupported += local.unsupported;
        }
      });
  EXPECT_GT(counts.planned, 300);
}

TEST(SpPlanners, UspEveryUlyssesDegree) {
  const SweepCounts counts =
      sweep(Method::kUsp, [](PlanRequest req, SweepCounts& c, const CostModel& model) {
        const int P = req.topology.world_size;
        for (int pu = 0; pu <= P; ++pu) {
          if (pu > 0 && (P % pu != 0 || pu > req.heads)) continue;
          req.options.ulysses_degree = pu;
          req.options.comm = pu % 2 ? CommMode::kOneSided : CommMode::kTwoSided;
          plan_and_validate(req, false, c, model);
        }
      });
  EXPECT_EQ(counts.unsupported, 0);
  EXPECT_GT(counts.planned, 1000);
}

TEST(SpPlanners, TasEveryUlyssesDegreeBothCommModes) {
  const SweepCounts counts =
      sweep(Method::kTas, [](PlanRequest req, SweepCounts& c, const CostModel& model) {
        const int P = req.topology.world_size;
        for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
          for (int pu = 0; pu <= P; ++pu) {
            if (pu > 0 && (P % pu != 0 || pu > req.heads)) continue;
            req.options.ulysses_degree = pu;
            req.options.comm = comm;
            plan_and_validate(req, false, c, model);
          }
        }
      });
  EXPECT_EQ(counts.unsupported, 0);
  EXPECT_GT(counts.planned, 1000);
}

TEST(SpPlanners, TorusBothCommModes) {
  const SweepCounts counts =
      sweep(Method::kTorus, [](PlanRequest req, SweepCounts& c, const CostModel& model) {
        const int P = req.topology.world_size;
        const int N = req.topology.machine_of_rank.back() + 1;
        for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
          for (int pu = 0; pu <= P; ++pu) {
            if (pu > 0 && (P % pu != 0 || pu > req.heads)) continue;
            req.options.ulysses_degree = pu;
            req.options.comm = comm;
            const int degree = pu ? pu : std::gcd(P, req.heads);
            // The paper's case: the machines divide the Ulysses degree (or a single machine).
            const bool torus_shape = degree % N == 0 || N == 1;
            SweepCounts local;
            plan_and_validate(req, !torus_shape, local, model);
            c.planned += local.planned;
            c.unsupported += local.unsupported;
          }
        }
      });
  EXPECT_GT(counts.planned, 1000);
}

TEST(SpPlanners, MeshEveryTileShape) {
  const SweepCounts counts =
      sweep(Method::kMesh, [](PlanRequest req, SweepCounts& c, const CostModel& model) {
        const int P = req.topology.world_size;
        for (int a = 1; a <= P; ++a) {
          if (P % a != 0) continue;
          req.options.mesh_rows = a;
          req.options.mesh_cols = P / a;
          for (TokenLayout layout : {TokenLayout::kContiguous, TokenLayout::kStriped}) {
            req.options.layout = layout;
            plan_and_validate(req, false, c, model);
          }
        }
      });
  EXPECT_EQ(counts.unsupported, 0);
  EXPECT_GT(counts.planned, 1000);
}

TEST(SpPlanners, MeshTileSearchAndAuto) {
  const CostModel model;
  for (int P : {4, 6, 8}) {
    const Topology topo = gpu_topology(2, P / 2);
    for (bool causal : {false, true}) {
      PlanRequest req = request(topo, Method::kMesh, 64 * P + 3, 8, 2, causal, 6);
      SweepCounts c;
      plan_and_validate(req, false, c, model);
      req.options.method = Method::kAuto;
      plan_and_validate(req, false, c, model);
      EXPECT_EQ(c.planned, 2);
    }
  }
}

TEST(SpPlanners, ShapesOnCpuTopology) {
  // The cpu backend's topology (PCIe inside, emulated network across) plans too.
  const CostModel model;
  for (Method m : {Method::kRing, Method::kUlysses, Method::kUsp, Method::kTas, Method::kTorus,
                   Method::kMesh}) {
    PlanRequest req = request(cpu_topology(4, 2), m, 37, 8, 4, true, 3);
    SweepCounts c;
    plan_and_validate(req, false, c, model);
    EXPECT_EQ(c.planned, 1) << method_name(m);
  }
}

TEST(SpPlanners, RequestValidationNamesTheField) {
  const Topology topo = gpu_topology(1, 2);
  PlanRequest req = request(topo, Method::kRing, 16, 6, 4, false, 0);
  try {
    plan_ring(req);
    FAIL() << "6 heads with 4 kv heads must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("kv_heads = 4"), std::string::npos) << e.what();
  }
  req = request(topo, Method::kUsp, 16, 8, 8, false, 0);
  req.options.ulysses_degree = 3;
  try {
    plan_usp(req);
    FAIL() << "Pu = 3 on 2 ranks must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ulysses_degree = 3"), std::string::npos) << e.what();
  }
  req = request(topo, Method::kRing, 0, 8, 8, false, 0);
  EXPECT_THROW(plan_ring(req), Error);
}

}  // namespace
}  // namespace tessera::sp
