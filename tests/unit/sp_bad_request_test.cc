// Bad plan requests at the C++ entry (PlanRequest / make_plan): every field out of range is
// refused with kInvalidArgument naming the field, its value and what was expected, for every
// method; sizes whose token or byte counts would overflow are refused before any planning.
// Options a method cannot honour (Ulysses degree, Mesh tile) are refused naming the option.
// The validator reports a plan holding extreme values (regions past int64) as invalid.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "tessera/core/error.h"
#include "tessera/sp/validator.h"
#include "unit/sp_test_util.h"

namespace tessera::sp {
namespace {

using testing::gpu_topology;
using testing::request;

const Method kMethods[] = {Method::kRing,  Method::kUlysses, Method::kUsp, Method::kTas,
                           Method::kTorus, Method::kMesh,    Method::kAuto};

// make_plan(request) must throw `code` with every part in its message.
void expect_refused(const PlanRequest& req, ErrorCode code,
                    std::initializer_list<std::string> parts) {
  const std::string what = method_name(req.options.method);
  try {
    (void)make_plan(req, CostModel::for_topology(req.topology));
    ADD_FAILURE() << what << ": planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << what << ": missing '" << part << "' in " << e.what();
    }
  }
}

struct BadField {
  const char* name;
  std::function<void(PlanRequest&)> set;
  std::string expected;  // part of the message
};

TEST(SpBadRequest, EveryFieldIsCheckedNamingIt) {
  const BadField cases[] = {
      {"batch 0", [](PlanRequest& r) { r.batch = 0; }, "batch = 0: expected >= 1"},
      {"batch < 0", [](PlanRequest& r) { r.batch = -4; }, "batch = -4: expected >= 1"},
      {"seq 0", [](PlanRequest& r) { r.seq_len = 0; }, "seq_len = 0: expected >= 1"},
      {"seq < 0", [](PlanRequest& r) { r.seq_len = -1; }, "seq_len = -1: expected >= 1"},
      {"heads 0", [](PlanRequest& r) { r.heads = 0; }, "heads = 0: expected >= 1"},
      {"kv_heads < 0", [](PlanRequest& r) { r.kv_heads = -2; },
       "kv_heads = -2: expected a divisor of heads = 8"},
      {"kv_heads not dividing", [](PlanRequest& r) { r.kv_heads = 3; },
       "kv_heads = 3: expected a divisor of heads = 8"},
      {"kv_heads above heads", [](PlanRequest& r) { r.kv_heads = 16; },
       "kv_heads = 16: expected a divisor of heads = 8"},
      {"head_dim 0", [](PlanRequest& r) { r.head_dim = 0; }, "head_dim = 0: expected >= 1"},
      {"joint < 0", [](PlanRequest& r) { r.joint_tokens = -1; },
       "joint_tokens = -1: expected >= 0"},
      {"dtype u8", [](PlanRequest& r) { r.dtype = DType::kU8; },
       "dtype = u8: expected bf16, f16 or f32"},
      {"dtype i64", [](PlanRequest& r) { r.dtype = DType::kI64; },
       "dtype = i64: expected bf16, f16 or f32"},
      {"tokens past int32", [](PlanRequest& r) { r.seq_len = int64_t(1) << 31; },
       "seq_len + joint_tokens = 2147483648 + 3: expected at most 2^31 - 1 tokens"},
      {"joint tokens past int32",
       [](PlanRequest& r) {
         r.seq_len = std::numeric_limits<int32_t>::max();
         r.joint_tokens = 1;
       },
       "seq_len + joint_tokens = 2147483647 + 1"},
      {"seq int64 max", [](PlanRequest& r) { r.seq_len = std::numeric_limits<int64_t>::max(); },
       "expected at most 2^31 - 1 tokens"},
      {"bytes past 2^60",
       [](PlanRequest& r) {
         r.batch = int64_t(1) << 40;
         r.seq_len = int64_t(1) << 20;
       },
       "would span more than 2^60 bytes"},
      {"head_dim int max",
       [](PlanRequest& r) {
         r.head_dim = std::numeric_limits<int>::max();
         r.seq_len = int64_t(1) << 30;
       },
       "would span more than 2^60 bytes"},
      {"empty topology", [](PlanRequest& r) { r.topology = Topology{}; },
       "topology: world_size = 1 with 0 machine entries"},
  };
  for (Method method : kMethods) {
    for (const BadField& c : cases) {
      SCOPED_TRACE(c.name);
      PlanRequest req = request(gpu_topology(2, 2), method, 64, 8, 2, true, 3);
      c.set(req);
      expect_refused(req, ErrorCode::kInvalidArgument, {c.expected});
    }
  }
}

TEST(SpBadRequest, LargestAcceptedSequenceStillPlans) {
  // 2^31 - 1 tokens in all: within every bound, so planned (not validated here: too large).
  PlanRequest req =
      request(gpu_topology(2, 4), Method::kRing, (int64_t(1) << 31) - 1 - 7, 8, 8, true, 7, 128);
  req.batch = 1;
  const Plan plan = make_plan(req, CostModel::for_topology(req.topology));
  EXPECT_EQ(plan.shape.total_tokens(), (int64_t(1) << 31) - 1);
}

TEST(SpBadRequest, MethodOptionsAreCheckedNamingThem) {
  for (Method method : {Method::kUsp, Method::kTas, Method::kTorus}) {
    for (int degree : {-1, 3, 5, 1 << 30}) {
      SCOPED_TRACE(str(method_name(method), " Pu ", degree));
      PlanRequest req = request(gpu_topology(2, 2), method, 64, 8, 8, false, 0);
      req.options.ulysses_degree = degree;
      try {
        (void)make_plan(req, CostModel::for_topology(req.topology));
        ADD_FAILURE() << "planned";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(str("ulysses_degree = ", degree)), std::string::npos)
            << e.what();
      }
    }
  }
  for (auto [rows, cols] : {std::pair{3, 1}, {-2, -2}, {4, 0}, {0, 4}, {1 << 16, 1 << 16}}) {
    SCOPED_TRACE(str("mesh ", rows, "x", cols));
    PlanRequest req = request(gpu_topology(2, 2), Method::kMesh, 64, 8, 8, false, 0);
    req.options.mesh_rows = rows;
    req.options.mesh_cols = cols;
    try {
      (void)make_plan(req, CostModel::for_topology(req.topology));
      ADD_FAILURE() << "planned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mesh"), std::string::npos) << e.what();
    }
  }
}

TEST(SpBadRequest, ValidatorReportsExtremeRegionsWithoutOverflow) {
  const PlanRequest req = request(gpu_topology(1, 2), Method::kRing, 8, 2, 2, false, 0);
  const Plan good = make_plan(req, CostModel::for_topology(req.topology));
  ASSERT_TRUE(validate_plan(good).ok());
  for (int64_t extreme :
       {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    Plan bad = good;
    for (Step& s : bad.ranks[0].steps) {
      for (Transfer& t : s.transfers) t.src.region.row_count = extreme;
      s.compute.q.positions.start = extreme;
      s.compute.q.positions.count = std::numeric_limits<int64_t>::max();
    }
    const ValidationReport report = validate_plan(bad);
    EXPECT_FALSE(report.ok()) << extreme;
  }
}

}  // namespace
}  // namespace tessera::sp
