// The split-KV decode kernel's split rule (src/decode/split_kv_rule.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "decode/split_kv_rule.h"
#include "tessera/core/error.h"

namespace tessera::decode {
namespace {

// An H200's wave for the tensor-core kernel: 132 multiprocessors x 3 CTAs.
constexpr int64_t kWave = 396;

TEST(SplitKvRule, FillsOneWaveWhereItCan) {
  // Llama-3-8B's 8 KV heads: the counts measured fastest on an H200 (docs/PERF.md).
  EXPECT_EQ(split_kv_splits(1, 8, 4096, kWave), 32);   // 256 CTAs of 128 tokens
  EXPECT_EQ(split_kv_splits(1, 8, 16384, kWave), 49);  // 392 CTAs
  EXPECT_EQ(split_kv_splits(16, 8, 4096, kWave), 3);   // 384 CTAs
  EXPECT_EQ(split_kv_splits(16, 8, 16384, kWave), 3);
  EXPECT_EQ(split_kv_splits(4, 8, 1024, kWave), 8);  // capped by 128-token splits
}

TEST(SplitKvRule, KeepsSplitsOfAtLeast128TokensAndOneSplitForShortContexts) {
  for (int64_t context : {1, 100, 127, 128, 255, 256, 1000, 131072}) {
    const int s = split_kv_splits(1, 1, context, kWave);
    EXPECT_GE(s, 1);
    EXPECT_LE(s, std::max<int64_t>(1, context / kMinSplitTokens)) << context;
  }
  EXPECT_EQ(split_kv_splits(64, 8, 100, kWave), 1);
  // Past one wave, more waves of shorter splits can still pay.
  EXPECT_GE(split_kv_splits(64, 8, 2048, kWave), 2);
}

TEST(SplitKvRule, RejectsNonPositiveArgumentsByName) {
  EXPECT_THROW(split_kv_splits(0, 8, 4096, kWave), Error);
  try {
    split_kv_splits(1, 8, 4096, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ctas_per_wave 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::decode
