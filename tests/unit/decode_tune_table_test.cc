// The decode tuner's table: written rows merge by shape, lookups pick the batch row at or
// above the plan's batch and the nearest context, malformed files are refused by line.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/core/error.h"
#include "tessera/decode/tune_table.h"

namespace tessera::decode {
namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

TEST(DecodeTuneTable, WriteMergesRowsOfTheSameShape) {
  const std::string path = temp_path("tessera_tune_merge.tsv");
  std::filesystem::remove(path);
  write_tune_table(
      path, {{"H200", "llama2-7b", 1, 4096, 4, 50.0}, {"H200", "llama2-7b", 16, 4096, 2, 400.0}});
  write_tune_table(path, {{"H200", "llama2-7b", 1, 4096, 8, 45.0}});
  const auto rows = read_tune_table(path);
  ASSERT_EQ(rows.size(), 2u);
  int cluster_b1 = 0;
  for (const auto& r : rows)
    if (r.batch == 1) cluster_b1 = r.cluster_size;
  EXPECT_EQ(cluster_b1, 8);
  std::filesystem::remove(path);
}

TEST(DecodeTuneTable, LookupPicksBatchAtOrAboveAndNearestContext) {
  const std::vector<TuneEntry> t = {{"H200", "llama2-7b", 1, 1024, 2, 1},
                                    {"H200", "llama2-7b", 1, 32768, 8, 1},
                                    {"H200", "llama2-7b", 16, 4096, 4, 1},
                                    {"H100", "llama2-7b", 1, 4096, 16, 1}};
  EXPECT_EQ(tuned_cluster_size(t, "H200", "llama2-7b", 1, 2000), 2);
  EXPECT_EQ(tuned_cluster_size(t, "H200", "llama2-7b", 1, 20000), 8);
  EXPECT_EQ(tuned_cluster_size(t, "H200", "llama2-7b", 4, 1024), 4);   // batch 16 row
  EXPECT_EQ(tuned_cluster_size(t, "H200", "llama2-7b", 64, 1024), 4);  // largest batch row
  EXPECT_EQ(tuned_cluster_size(t, "H100", "llama2-7b", 1, 1024), 16);
  EXPECT_FALSE(tuned_cluster_size(t, "H200", "llama3-8b", 1, 4096).has_value());
}

TEST(DecodeTuneTable, MissingFileIsEmptyAndMalformedLineIsNamed) {
  EXPECT_TRUE(read_tune_table(temp_path("tessera_tune_does_not_exist.tsv")).empty());
  const std::string path = temp_path("tessera_tune_bad.tsv");
  {
    std::ofstream f(path);
    f << "# header\nH200\tllama2-7b\t1\t4096\t4\t50\nH200\tllama2-7b\tone\t4096\t4\t50\n";
  }
  try {
    read_tune_table(path);
    FAIL() << "a malformed line was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":3:"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// Found while writing fuzz_tune_table (the NaN by the fuzzer's range check, the wrap by
// reading the parser): a cluster size past int read back as its low bits, and NaN or infinite
// times were taken.
TEST(DecodeTuneTable, OutOfRangeFieldsAreRefusedNotWrapped) {
  const std::string path = temp_path("tessera_tune_range.tsv");
  for (const char* row :
       {"H200\tllama2-7b\t1\t4096\t4294967297\t50", "H200\tllama2-7b\t1\t4096\t17\t50",
        "H200\tllama2-7b\t1\t4096\t0\t50", "H200\tllama2-7b\t1\t4096\t4\tnan",
        "H200\tllama2-7b\t1\t4096\t4\tinf", "H200\tllama2-7b\t1\t4096\t4\t-1"}) {
    {
      std::ofstream f(path);
      f << row << "\n";
    }
    EXPECT_THROW(read_tune_table(path), Error) << row;
  }
  std::filesystem::remove(path);
}

TEST(DecodeTuneTable, WriterRefusesNamesThatWouldNotReadBack) {
  const std::string path = temp_path("tessera_tune_names.tsv");
  std::filesystem::remove(path);
  for (const TuneEntry& e : {TuneEntry{"#H200", "llama2-7b", 1, 4096, 4, 50},
                             TuneEntry{"H\t200", "llama2-7b", 1, 4096, 4, 50},
                             TuneEntry{"H200", "llama2\n7b", 1, 4096, 4, 50}}) {
    try {
      write_tune_table(path, {e});
      ADD_FAILURE() << "wrote gpu '" << e.gpu << "' model '" << e.model << "'";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("tune table entry"), std::string::npos) << err.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace tessera::decode
