// The strategy rule (sched/rule.h): its table read back as written and merged, malformed rows
// refused naming the line, strategies by name (auto among them), the pick (the fastest strategy
// at the nearest measured token count within a factor of 2, sequential elsewhere or for another
// GPU, degree or width), and the `auto` strategy running its pick: bitwise the plain forward on
// the cpu backend at TP 1 and 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cpu_dist_util.h"
#include "sched_test_util.h"
#include "tessera/core/error.h"
#include "tessera/model/llama_model.h"
#include "tessera/sched/rule.h"

namespace tessera::testing {
namespace {

using sched::SchedTuneEntry;

std::string temp_table(const char* name) {
  const std::string path = ::testing::TempDir() + name;
  std::remove(path.c_str());
  return path;
}

const sched::RuleKey kKey{"H100", 4, 8192};

std::vector<SchedTuneEntry> measured() {
  return {{"H100", 4, 8192, 2048, "sequential", 100.0},
          {"H100", 4, 8192, 2048, "nanoflow", 90.0},
          {"H100", 4, 8192, 2048, "dual_batch", 95.0},
          {"H100", 4, 8192, 8192, "sequential", 300.0},
          {"H100", 4, 8192, 8192, "tokenweave", 310.0},
          {"H100", 2, 8192, 2048, "dual_batch", 10.0},   // another degree
          {"H200", 4, 8192, 2048, "tokenweave", 10.0},   // another GPU
          {"H100", 4, 4096, 2048, "tokenweave", 10.0}};  // another width
}

TEST(SchedRule, TheTableReadsBackWhatWasWrittenAndMergesRows) {
  const std::string path = temp_table("sched_rule_table.tsv");
  EXPECT_TRUE(sched::read_sched_tune_table(path).empty()) << "a missing file is an empty table";
  sched::write_sched_tune_table(path, measured());
  std::vector<SchedTuneEntry> back = sched::read_sched_tune_table(path);
  ASSERT_EQ(back.size(), measured().size());
  EXPECT_EQ(back[1].strategy, "nanoflow");
  EXPECT_EQ(back[1].tokens, 2048);
  EXPECT_DOUBLE_EQ(back[1].median_us, 90.0);
  // A new measurement of one (case, strategy) replaces its row.
  sched::write_sched_tune_table(path, {{"H100", 4, 8192, 2048, "nanoflow", 120.0}});
  back = sched::read_sched_tune_table(path);
  EXPECT_EQ(back.size(), measured().size());
  EXPECT_EQ(sched::pick_strategy(back, kKey, 2048), "dual_batch");
}

TEST(SchedRule, MalformedRowsAreRefusedNamingTheLine) {
  const std::string path = temp_table("sched_rule_bad.tsv");
  for (const char* row : {"H100\t4\t8192\t2048\tfastest\t90\n", "H100\t4\t8192\t0\tnanoflow\t90\n",
                          "H100\t4\t8192\t2048\tnanoflow\t-1\n", "H100\t4\t8192\n",
                          "H100\t4\t8192\t2048\t-5\tnanoflow\t90\n",
                          "H100\t4\t8192\t2048\t100\tnanoflow\t90\textra\n"}) {
    std::ofstream(path, std::ios::trunc) << "# header\n" << row;
    try {
      sched::read_sched_tune_table(path);
      ADD_FAILURE() << "read: " << row;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(path + ":2"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(sched::write_sched_tune_table(path, {{"H100", 4, 8192, 2048, "fastest", 1.0}}),
               Error);
  EXPECT_THROW(sched::write_sched_tune_table(path, {{"a\tb", 4, 8192, 2048, "nanoflow", 1.0}}),
               Error);
  // A table whose directory cannot be made (a file stands in its place): a Tessera error naming
  // the table, not a filesystem exception.
  try {
    sched::write_sched_tune_table(path + "/inside/table.tsv", measured());
    ADD_FAILURE() << "a table under a file was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kSystem);
    EXPECT_NE(std::string(e.what()).find("cannot make its directory"), std::string::npos)
        << e.what();
  }
}

TEST(SchedRule, PicksTheFastestAtTheNearestMeasuredCountWithinAFactorOfTwo) {
  const std::vector<SchedTuneEntry> table = measured();
  EXPECT_EQ(sched::pick_strategy(table, kKey, 2048), "nanoflow");
  EXPECT_EQ(sched::pick_strategy(table, kKey, 3000), "nanoflow");    // nearer 2048 than 8192
  EXPECT_EQ(sched::pick_strategy(table, kKey, 6000), "sequential");  // 8192's fastest
  EXPECT_EQ(sched::pick_strategy(table, kKey, 1024), "nanoflow");    // a factor of 2
  EXPECT_EQ(sched::pick_strategy(table, kKey, 1000), "sequential");  // nothing measured near
  EXPECT_EQ(sched::pick_strategy(table, kKey, 64), "sequential");
  EXPECT_EQ(sched::pick_strategy(table, {"H100", 4, 2048}, 2048), "sequential");
  EXPECT_EQ(sched::pick_strategy({}, kKey, 2048), "sequential");
}

// At 8192 rows a decode-heavy step (6144 decodes after 1024 positions) and a prefill-heavy one
// (3072 decodes) were measured apart: each step takes the rows of the mix nearest its own
// (cached positions per row), the rows without a mix only where none has one.
TEST(SchedRule, PicksAmongTheRowsOfTheNearestMix) {
  const int64_t heavy = 6144 * 1024, light = 3072 * 1024;
  const std::vector<SchedTuneEntry> table = {
      {"H200", 1, 4096, 8192, "sequential", 100.0, heavy},
      {"H200", 1, 4096, 8192, "nanoflow:60", 85.0, heavy},
      {"H200", 1, 4096, 8192, "sequential", 70.0, light},
      {"H200", 1, 4096, 8192, "nanoflow:60", 75.0, light},
      {"H200", 1, 4096, 2048, "dual_batch", 20.0},  // no mix recorded
      {"H200", 1, 4096, 2048, "sequential", 30.0}};
  const sched::RuleKey key{"H200", 1, 4096};
  EXPECT_EQ(sched::pick_strategy(table, key, 8192, heavy), "nanoflow:60");
  EXPECT_EQ(sched::pick_strategy(table, key, 8192, light), "sequential");
  EXPECT_EQ(sched::pick_strategy(table, key, 8192, 0), "sequential");  // prompts only: light's
  EXPECT_EQ(sched::pick_strategy(table, key, 6000, 6000 * 1000), "nanoflow:60");
  EXPECT_EQ(sched::pick_strategy(table, key, 8192), "sequential");  // unknown mix: every row
  EXPECT_EQ(sched::pick_strategy(table, key, 2048, 2048 * 512), "dual_batch");
  // Written and read back with its mix; a six-column row (before the mix) reads as unknown.
  const std::string path = temp_table("sched_rule_mix.tsv");
  sched::write_sched_tune_table(path, table);
  const std::vector<SchedTuneEntry> back = sched::read_sched_tune_table(path);
  ASSERT_EQ(back.size(), table.size());
  EXPECT_EQ(back[0].cached, heavy);
  EXPECT_EQ(back[4].cached, -1);
  std::ofstream(path, std::ios::trunc) << "H200\t1\t4096\t8192\t0\tnanoflow\t9\n"
                                       << "H200\t1\t4096\t8192\tsequential\t10\n";
  const std::vector<SchedTuneEntry> mixed = sched::read_sched_tune_table(path);
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[0].cached, 0);
  EXPECT_EQ(mixed[1].cached, -1);
  EXPECT_THROW(
      sched::write_sched_tune_table(path, {{"H200", 1, 4096, 8192, "sequential", 1.0, -2}}), Error);
}

TEST(SchedRule, StrategiesByNameIncludeTheRule) {
  const std::string path = temp_table("sched_rule_named.tsv");
  sched::write_sched_tune_table(path, measured());
  ::setenv("TESSERA_SCHED_TUNE_TABLE", path.c_str(), 1);
  const auto rule = sched::make_named_strategy("auto", kKey);
  ::unsetenv("TESSERA_SCHED_TUNE_TABLE");
  EXPECT_EQ(rule->name(), "auto");
  EXPECT_EQ(sched::make_named_strategy("dual_batch", kKey)->name(), "dual_batch");
  try {
    sched::make_named_strategy("fastest", kKey);
    ADD_FAILURE() << "an unknown name made a strategy";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tokenweave or auto"), std::string::npos) << e.what();
  }
  // A partitioned strategy is a name too, but not one the rule picks from its table.
  EXPECT_EQ(sched::make_named_strategy("nanoflow@layers=1", kKey)->name(), "nanoflow@layers=1");
  try {
    sched::make_rule_strategy(kKey, {{"H100", 4, 8192, 2048, "nanoflow@layers=1", 95.0}});
    ADD_FAILURE() << "the rule took a partitioned strategy";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nanoflow@layers=1': expected a strategy without a "
                                         "partition"),
              std::string::npos)
        << e.what();
  }
}

TEST(SchedRule, AutoRunsItsPickBitwiseThePlainForward) {
  const model::DecoderConfig config = tiny_llama_config();
  for (int ranks : {1, 2}) {
    run_cpu_ranks(ranks, 1, test_options(/*create_heap=*/false), [&](RankContext& ctx) {
      auto make = [&] {
        return model::LlamaModel(config,
                                 model::random_llama_weights(config, 11, ctx.rank, ctx.size),
                                 {4, 64}, ctx.size > 1 ? ctx.world.get() : nullptr);
      };
      // Prefills of 87 rows (tokenweave measured fastest there), then a decode step of 4 rows
      // (nothing measured: sequential).
      const sched::RuleKey key{"cpu", ctx.size, config.hidden_size};
      const auto rule = sched::make_rule_strategy(
          key, {{"cpu", ctx.size, config.hidden_size, 90, "tokenweave", 1.0},
                {"cpu", ctx.size, config.hidden_size, 90, "sequential", 2.0}});
      EXPECT_EQ(rule->name(), "auto");
      // Its split is the pick's: tokenweave's two nano-batches at 87 rows, sequential's one at 4.
      EXPECT_EQ(rule->split(batch_of({5, 9, 3, 70})).size(), 2u);
      EXPECT_EQ(rule->split(batch_of({1, 1, 1, 1})).size(), 1u);
      model::LlamaModel plain = make(), scheduled = make();
      EXPECT_EQ(prefill_then_decode(scheduled, rule.get()), prefill_then_decode(plain, nullptr))
          << "rank " << ctx.rank;
    });
  }
}

}  // namespace
}  // namespace tessera::testing
