// Names of Hopper GEMM configurations and the rule that picks one (gemm_config.h).
#include "tessera/gemm/gemm_config.h"

#include <charconv>

#include "tessera/core/error.h"

namespace tessera::gemm {

namespace {

const char* tile_name(GemmTile tile) {
  return tile == GemmTile::k128x256 ? "128x256" : "128x128";
}

int parse_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : -1;
}

}  // namespace

std::string gemm_config_name(const GemmConfig& config) {
  const std::string split = config.split == GemmSplit::kDataParallel ? std::string("dp")
                            : config.split == GemmSplit::kStreamK    ? std::string("sk")
                                                                     : str("k", config.splits);
  return str(tile_name(config.tile), "/", split, "/s", config.swizzle);
}

GemmConfig parse_gemm_config(std::string_view text, std::string_view what) {
  auto refuse = [&]() {
    throw_error(ErrorCode::kInvalidArgument,
                str(what, " = '", text,
                    "': expected TILE/SPLIT/sSWIZZLE with TILE 128x256 or 128x128, SPLIT dp, sk or "
                    "k2..k16, SWIZZLE 1, 2, 4 or 8 (e.g. 128x256/dp/s1)"));
  };
  const size_t a = text.find('/'), b = a == text.npos ? a : text.find('/', a + 1);
  if (b == text.npos) refuse();
  const std::string_view tile = text.substr(0, a), split = text.substr(a + 1, b - a - 1),
                         swizzle = text.substr(b + 1);
  GemmConfig c;
  if (tile == "128x256") {
    c.tile = GemmTile::k128x256;
  } else if (tile == "128x128") {
    c.tile = GemmTile::k128x128;
  } else {
    refuse();
  }
  if (split == "dp") {
    c.split = GemmSplit::kDataParallel;
  } else if (split == "sk") {
    c.split = GemmSplit::kStreamK;
  } else if (split.size() >= 2 && split[0] == 'k') {
    c.split = GemmSplit::kSplitK;
    c.splits = parse_int(split.substr(1));
    if (c.splits < 2 || c.splits > 16) refuse();
  } else {
    refuse();
  }
  c.swizzle = swizzle.size() >= 2 && swizzle[0] == 's' ? parse_int(swizzle.substr(1)) : -1;
  if (c.swizzle != 1 && c.swizzle != 2 && c.swizzle != 4 && c.swizzle != 8) refuse();
  return c;
}

std::vector<GemmConfig> gemm_config_candidates() {
  std::vector<GemmConfig> out;
  for (GemmTile tile : {GemmTile::k128x256, GemmTile::k128x128}) {
    for (int swizzle : {1, 4}) {
      out.push_back({tile, GemmSplit::kDataParallel, 1, swizzle});
      out.push_back({tile, GemmSplit::kStreamK, 1, swizzle});
      for (int splits : {2, 4}) out.push_back({tile, GemmSplit::kSplitK, splits, swizzle});
    }
  }
  return out;
}

GemmConfig choose_gemm_config(int64_t m, int64_t n, int64_t k, int sms) {
  (void)k;
  TESSERA_CHECK_ARG(m >= 1 && n >= 1 && sms >= 1, "choose_gemm_config: m ", m, ", n ", n, ", sms ",
                    sms, ": expected each >= 1");
  // 128 x 256 tiles in clusters of two along M.
  const int64_t big_tiles = ((m + 255) / 256) * 2 * ((n + 255) / 256);
  if (big_tiles >= 4 * int64_t(sms)) return {GemmTile::k128x256, GemmSplit::kDataParallel, 1, 1};
  if (m <= 256) return {GemmTile::k128x128, GemmSplit::kStreamK, 1, 1};
  return {GemmTile::k128x256, GemmSplit::kStreamK, 1, 1};
}

}  // namespace tessera::gemm
