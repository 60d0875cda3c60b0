// The Hopper GEMM configurations' names and the rule that picks one (gemm_config.h).
#include "tessera/gemm/gemm_config.h"

#include <gtest/gtest.h>

#include "tessera/core/error.h"

namespace tessera::gemm {
namespace {

TEST(GemmConfig, NamesRoundTrip) {
  for (const GemmConfig& c : gemm_config_candidates()) {
    const std::string name = gemm_config_name(c);
    EXPECT_EQ(parse_gemm_config(name, "--configs"), c) << name;
  }
  EXPECT_EQ(gemm_config_name({GemmTile::k128x128, GemmSplit::kSplitK, 4, 8}), "128x128/k4/s8");
}

TEST(GemmConfig, BadNamesAreRefusedNamingTheArgument) {
  for (const char* bad :
       {"", "128x256", "128x256/dp", "64x64/dp/s1", "128x256/k1/s1", "128x256/k17/s1",
        "128x256/dp/s3", "128x256/xx/s1", "128x256/dp/1", "64x256pp/sk/s1", "128x128pp/k2/s1"}) {
    try {
      parse_gemm_config(bad, "--configs");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("--configs"), std::string::npos) << e.what();
    }
  }
}

TEST(GemmConfig, ConfigurationsBuiltByHandAreValidated) {
  for (const GemmConfig& c : gemm_config_candidates())
    EXPECT_NO_THROW(validate_gemm_config(c, "c"));
  EXPECT_THROW(validate_gemm_config({GemmTile::k64x256PingPong, GemmSplit::kStreamK, 1, 1}, "c"),
               Error);
  EXPECT_THROW(validate_gemm_config({GemmTile::k128x256, GemmSplit::kSplitK, 1, 1}, "c"), Error);
  EXPECT_THROW(validate_gemm_config({GemmTile::k128x256, GemmSplit::kDataParallel, 1, 3}, "c"),
               Error);
}

TEST(GemmConfig, RuleFollowsTheSweep) {
  const int sms = 132;
  // 8192^3, a long K loop: 128 x 256 tiles, stream-K for the last wave.
  EXPECT_EQ(choose_gemm_config(8192, 8192, 8192, sms),
            (GemmConfig{GemmTile::k128x256, GemmSplit::kStreamK, 1, 1}));
  // A short K loop: ping-pong whole tiles, rasterized in groups from 16384 rows.
  EXPECT_EQ(choose_gemm_config(4096, 8192, 1024, sms),
            (GemmConfig{GemmTile::k128x128PingPong, GemmSplit::kDataParallel, 1, 1}));
  EXPECT_EQ(choose_gemm_config(16384, 8192, 1024, sms).swizzle, 4);
  // 128 rows, 2560 columns: 40 tiles of 128 x 64 for 132 multiprocessors split K 3 ways
  // (120 CTAs, one wave), and cuBLASLt is preferred there; 1280 columns: at most 4 ways.
  EXPECT_EQ(choose_gemm_config(128, 2560, 8192, sms),
            (GemmConfig{GemmTile::k128x64, GemmSplit::kSplitK, 3, 1}));
  EXPECT_EQ(choose_gemm_config(128, 1280, 8192, sms).splits, 4);
  EXPECT_TRUE(gemm_prefers_cublaslt(128, 2560, 8192));
  // 72 tiles of 128 x 64, a short wave: stream-K; 128 of them: whole tiles, in groups of 4.
  EXPECT_EQ(choose_gemm_config(128, 4608, 12288, sms),
            (GemmConfig{GemmTile::k128x64, GemmSplit::kStreamK, 1, 1}));
  EXPECT_EQ(choose_gemm_config(128, 8192, 2048, sms),
            (GemmConfig{GemmTile::k128x64, GemmSplit::kDataParallel, 1, 4}));
  // More than a wave of 128 x 64 tiles, at most one of 128 x 96: 96 tiles of those (73% of the
  // grid: whole tiles) for 9216 columns, 128 for 12288.
  EXPECT_EQ(choose_gemm_config(128, 9216, 12288, sms),
            (GemmConfig{GemmTile::k128x96, GemmSplit::kDataParallel, 1, 4}));
  EXPECT_EQ(choose_gemm_config(128, 12288, 3072, sms),
            (GemmConfig{GemmTile::k128x96, GemmSplit::kDataParallel, 1, 4}));
  // 8704 columns: 91 tiles of 128 x 96, under 70% of the grid: stream-K.
  EXPECT_EQ(choose_gemm_config(128, 8704, 8192, sms),
            (GemmConfig{GemmTile::k128x96, GemmSplit::kStreamK, 1, 1}));
  // 14336 columns: two waves of 128 x 96 (192 columns a multiprocessor) against one of 128 x
  // 128 (112 tiles): 128 x 128; 20480 columns: two waves either way, 192 columns against 256:
  // 128 x 96.
  EXPECT_EQ(choose_gemm_config(128, 14336, 8192, sms).tile, GemmTile::k128x128);
  EXPECT_EQ(choose_gemm_config(128, 20480, 8192, sms).tile, GemmTile::k128x96);
  // Wide enough to fill the grid: whole tiles (cuBLASLt still preferred at one row tile).
  EXPECT_EQ(choose_gemm_config(128, 14336, 8192, sms).split, GemmSplit::kDataParallel);
  EXPECT_TRUE(gemm_prefers_cublaslt(128, 14336, 8192));
  EXPECT_FALSE(gemm_prefers_cublaslt(1024, 14336, 8192));
  EXPECT_FALSE(gemm_prefers_cublaslt(8192, 8192, 8192));
  EXPECT_THROW(choose_gemm_config(0, 1, 1, sms), Error);
}

}  // namespace
}  // namespace tessera::gemm
