// The tensor-parallel tuner's table: rows merge by case, lookups take the nearest M within a
// factor of 2 of the same GPU, ranks, machines, op, N and K, malformed files are refused by
// line, and plan_tp(kAuto) follows a matching row over the cost model (and only then).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/comm/topology.h"
#include "tessera/core/error.h"
#include "tessera/sp/cost_model.h"
#include "tessera/tp/planner.h"
#include "tessera/tp/tune_table.h"

namespace tessera::tp {
namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

TpTuneEntry row(const char* gpu, int64_t m, double fused, double unfused) {
  return {gpu, 4, 1, TpOp::kAllGatherGemm, 2560, 8192, m, fused, unfused};
}

TpRequest request(int64_t m) {
  TpRequest r;
  r.op = TpOp::kAllGatherGemm;
  r.m = m;
  r.n = 2560;
  r.k = 8192;
  r.world_size = 4;
  r.num_machines = 1;
  return r;
}

TEST(TpTuneTable, WriteMergesRowsOfTheSameCase) {
  const std::string path = temp_path("tessera_tp_tune_merge.tsv");
  std::filesystem::remove(path);
  write_tp_tune_table(path, {row("H200", 128, 100, 200), row("H200", 4096, 400, 500)});
  write_tp_tune_table(path, {row("H200", 128, 300, 200)});
  const auto rows = read_tp_tune_table(path);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    if (r.m == 128) EXPECT_EQ(r.fused_us, 300);
    EXPECT_EQ(r.op, TpOp::kAllGatherGemm);
    EXPECT_EQ(r.world_size, 4);
  }
  std::filesystem::remove(path);
}

TEST(TpTuneTable, LookupTakesTheNearestMWithinAFactorOfTwo) {
  const std::vector<TpTuneEntry> t = {row("H200", 128, 1, 2), row("H200", 4096, 3, 4),
                                      row("H100", 1000, 5, 6)};
  ASSERT_TRUE(tuned_row(t, "H200", request(200)).has_value());
  EXPECT_EQ(tuned_row(t, "H200", request(200))->m, 128);
  EXPECT_EQ(tuned_row(t, "H200", request(3000))->m, 4096);
  EXPECT_FALSE(tuned_row(t, "H200", request(1000)).has_value());  // 128 and 4096 too far
  EXPECT_FALSE(tuned_row(t, "B200", request(128)).has_value());
  TpRequest other = request(128);
  other.k = 4096;
  EXPECT_FALSE(tuned_row(t, "H200", other).has_value());
  other = request(128);
  other.op = TpOp::kGemmReduceScatter;
  EXPECT_FALSE(tuned_row(t, "H200", other).has_value());
}

TEST(TpTuneTable, MalformedLinesAreRefusedNamingTheLine) {
  const std::string path = temp_path("tessera_tp_tune_bad.tsv");
  for (const char* line : {"H200\t4\t1\tag_gemm\t2560\t8192\t128\t100\n",  // a field short
                           "H200\t4\t1\tallgather\t2560\t8192\t128\t100\t200\n",
                           "H200\t0\t1\tag_gemm\t2560\t8192\t128\t100\t200\n",
                           "H200\t4\t1\tag_gemm\t2560\t8192\t128\t-1\t200\n",
                           "H200\t4\t1\tag_gemm\t2560\t8192\t4294967297x\t100\t200\n"}) {
    std::ofstream(path) << "# header\n" << line;
    try {
      read_tp_tune_table(path);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(path + ":2:"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(write_tp_tune_table(path, {row("H\t200", 128, 1, 2)}), Error);
  EXPECT_THROW(write_tp_tune_table(path, {row("H200", 128, 0, 2)}), Error);
  std::filesystem::remove(path);
}

TEST(TpTuneTable, PlannerFollowsAMatchingRowOnlyWhenAskedToChoose) {
  const std::string path = temp_path("tessera_tp_tune_plan.tsv");
  std::filesystem::remove(path);
  ASSERT_EQ(setenv("TESSERA_TP_TUNE_TABLE", path.c_str(), 1), 0);
  const Topology topo = cpu_topology(4, 1);
  const sp::CostModel cost = sp::CostModel::for_topology(topo);
  TpPlanOptions options;
  options.tuned_gpu = "H200";
  const TpPlan by_model = plan_tp(request(4096), topo, cost, options);
  // Rows saying the opposite of the cost model at M 4096, nothing at M 128.
  write_tp_tune_table(path, {by_model.fused ? row("H200", 4096, 900, 100)
                                            : row("H200", 4096, 100, 900)});
  const TpPlan tuned = plan_tp(request(4096), topo, cost, options);
  EXPECT_NE(tuned.fused, by_model.fused) << tuned.reason;
  EXPECT_NE(tuned.reason.find("tuning table"), std::string::npos) << tuned.reason;
  EXPECT_EQ(plan_tp(request(128), topo, cost, options).reason.find("tuning table"),
            std::string::npos);
  options.fuse = TpPlanOptions::Fuse::kFused;  // the caller's word wins over the table
  EXPECT_TRUE(plan_tp(request(4096), topo, cost, options).fused);
  options.fuse = TpPlanOptions::Fuse::kAuto;
  options.tuned_gpu.clear();  // no GPU named: the cost model alone
  EXPECT_EQ(plan_tp(request(4096), topo, cost, options).fused, by_model.fused);
  unsetenv("TESSERA_TP_TUNE_TABLE");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera::tp
