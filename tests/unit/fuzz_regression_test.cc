// What the fuzz targets (fuzz/) found, each reduced to the case it showed: the input that
// crashed or misbehaved before the fix, and what the entry does now. The crashing inputs also
// stay in fuzz/corpus/, so the fuzzers replay them on every run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "rank_launch.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/core/table_file.h"
#include "tessera/sp/validator.h"
#include "unit/sp_test_util.h"

namespace tessera {
namespace {

using sp::testing::gpu_topology;
using sp::testing::request;

const Param<double> kUnitInterval("TESSERA_TEST_ONLY_UNIT_INTERVAL", 0.5,
                                  "a number in [0, 1] for this test", 0.0, 1.0);

// `fn` throws tessera::Error with `code` and `part` in its message.
template <typename Fn>
void expect_error(const Fn& fn, ErrorCode code, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// fuzz_validator: a topology with machine id -1 made usp index its per-machine counts at -1.
TEST(FuzzRegression, PlannersRefuseMachineIdsOutsideTheRanks) {
  for (sp::Method method :
       {sp::Method::kRing, sp::Method::kUlysses, sp::Method::kUsp, sp::Method::kTas,
        sp::Method::kTorus, sp::Method::kMesh, sp::Method::kAuto}) {
    for (int bad : {-1, 4}) {
      SCOPED_TRACE(str(sp::method_name(method), " machine ", bad));
      sp::PlanRequest req = request(gpu_topology(2, 2), method, 64, 8, 2, false, 0);
      req.topology.machine_of_rank[1] = bad;
      expect_error(
          [&] { (void)sp::make_plan(req, sp::CostModel::for_topology(req.topology)); },
          ErrorCode::kInvalidArgument,
          str("topology: machine_of_rank[1] = ", bad, ": expected a machine index in [0, 4)"));
    }
  }
}

// fuzz_planners: mesh's tile search divided by a 0 GB/s NVLink and cast the infinite ratio to
// int; a valid but very slow link gave ratios past int.
TEST(FuzzRegression, MeshChecksItsCostModelAndCapsBlockCounts) {
  const sp::PlanRequest req = request(gpu_topology(2, 2), sp::Method::kMesh, 64, 8, 2, false, 0);
  sp::CostModel broken = sp::CostModel::for_topology(req.topology);
  broken.nvlink.bandwidth_gbps = 0;
  expect_error([&] { (void)sp::plan_mesh(req, broken); }, ErrorCode::kInvalidArgument,
               "cost model link nvlink: bandwidth = 0");

  sp::CostModel slow = sp::CostModel::for_topology(req.topology);
  slow.set("network_gbps", 1e-12);  // 8 KiB chunks take ~10^13 us: ~10^12 blocks to hide
  const sp::Plan plan = sp::plan_mesh(req, slow);
  EXPECT_TRUE(sp::validate_plan(plan).ok());
  const std::string most = std::to_string(std::numeric_limits<int>::max());
  EXPECT_TRUE(plan.param("q_blocks") == most || plan.param("kv_blocks") == most) << plan.summary();
}

// fuzz_cli_options: `--cost num_sms=1e300` converted 1e300 to int.
TEST(FuzzRegression, CostModelRefusesCountsPastIntAndNonFiniteTerms) {
  sp::CostModel model;
  expect_error([&] { model.set("num_sms", 1e300); }, ErrorCode::kInvalidArgument,
               "cost model term num_sms = 1e+300: expected a count from 1 to 2147483647");
  expect_error([&] { model.apply("q_tile_rows=3e9"); }, ErrorCode::kInvalidArgument,
               "cost model term q_tile_rows = 3e+09");
  expect_error([&] { model.apply("nvlink_us=inf"); }, ErrorCode::kInvalidArgument,
               "cost model term nvlink_us = inf: expected a finite number");
  model.apply("num_sms=100,q_tile_rows=64");
  EXPECT_EQ(model.num_sms, 100);
  EXPECT_EQ(model.q_tile_rows, 64);
}

// fuzz_validator ran out of memory on a plan of 2^31 tokens (an atom id per token), and
// fuzz_planners timed out validating a plan of 2^31 - 1 heads (per-head checks per step).
TEST(FuzzRegression, ValidatorRefusesPlansTooLargeToCheckAtOnce) {
  sp::PlanRequest heads = request(gpu_topology(1, 2), sp::Method::kRing, 8,
                                  std::numeric_limits<int>::max(), 0, false, 0, 1);
  const sp::Plan many_heads = sp::make_plan(heads, sp::CostModel::for_topology(heads.topology));
  expect_error([&] { (void)sp::validate_plan(many_heads); }, ErrorCode::kUnsupported,
               "2147483647 heads: plans of at most 2^27 coverage cells can be checked");

  sp::PlanRequest tokens =
      request(gpu_topology(1, 2), sp::Method::kRing, (int64_t(1) << 28) - 3, 2, 2, false, 4, 1);
  const sp::Plan many_tokens = sp::make_plan(tokens, sp::CostModel::for_topology(tokens.topology));
  expect_error([&] { (void)sp::validate_plan(many_tokens); }, ErrorCode::kUnsupported,
               "268435453 + 4 tokens: plans of at most 2^28 tokens can be checked");
}

// fuzz_env_params: override(NaN) passed the range check (every comparison with NaN is false).
TEST(FuzzRegression, ParamOverrideRefusesNonFiniteNumbers) {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    expect_error([&] { kUnitInterval.override(bad); }, ErrorCode::kInvalidArgument,
                 "TESSERA_TEST_ONLY_UNIT_INTERVAL");
    EXPECT_EQ(kUnitInterval.get(), 0.5);  // the refused override left nothing behind
  }
  kUnitInterval.override(1.0);
  EXPECT_EQ(kUnitInterval.get(), 1.0);
  kUnitInterval.clear_override();
}

// fuzz_sched_tune_table: a field with a NUL byte ("2\0.6") read as its text before the NUL, the
// C parsers stopping there as at the end.
TEST(FuzzRegression, TableFieldsWithANulByteAreNotNumbers) {
  const std::string time("2\0.6", 4), count("16\0", 3);
  double t = 0;
  int64_t n = 0;
  EXPECT_FALSE(parse_table_time(time, t));
  EXPECT_FALSE(parse_table_count(count, 100, n));
  EXPECT_TRUE(parse_table_time("2.6", t));
  EXPECT_EQ(t, 2.6);
  EXPECT_TRUE(parse_table_count("16", 100, n));
  EXPECT_EQ(n, 16);
}

// fuzz_cli_options: a zero factor after an overflowing pair gave SIZE_MAX instead of 0.
TEST(FuzzRegression, SaturatingProductWithAZeroFactorIsZero) {
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  EXPECT_EQ(cli::saturating_product({997104, size_t(1) << 63, 0}), 0u);
  EXPECT_EQ(cli::saturating_product({2, kMax}), kMax);
  EXPECT_EQ(cli::saturating_product({3, 4, 5}), 60u);
}

}  // namespace
}  // namespace tessera
