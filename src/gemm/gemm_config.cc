// Names of Hopper GEMM configurations and the rule that picks one (gemm_config.h).
#include "tessera/gemm/gemm_config.h"

#include <charconv>

#include "tessera/core/error.h"

namespace tessera::gemm {

namespace {

constexpr GemmTile kTiles[] = {GemmTile::k128x256, GemmTile::k128x128, GemmTile::k64x256PingPong,
                               GemmTile::k128x128PingPong};

const char* tile_name(GemmTile tile) {
  switch (tile) {
    case GemmTile::k128x256:
      return "128x256";
    case GemmTile::k128x128:
      return "128x128";
    case GemmTile::k64x256PingPong:
      return "64x256pp";
    case GemmTile::k128x128PingPong:
      return "128x128pp";
  }
  return "?";
}

bool ping_pong(GemmTile tile) {
  return tile == GemmTile::k64x256PingPong || tile == GemmTile::k128x128PingPong;
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
                    "': expected TILE/SPLIT/sSWIZZLE with TILE 128x256, 128x128 (SPLIT dp, sk or "
                    "k2..k16), 64x256pp or 128x128pp (SPLIT dp), SWIZZLE 1, 2, 4 or 8 (e.g. "
                    "128x256/dp/s1)"));
  };
  const size_t a = text.find('/'), b = a == text.npos ? a : text.find('/', a + 1);
  if (b == text.npos) refuse();
  const std::string_view tile = text.substr(0, a), split = text.substr(a + 1, b - a - 1),
                         swizzle = text.substr(b + 1);
  GemmConfig c;
  bool known = false;
  for (GemmTile t : kTiles) {
    if (tile == tile_name(t)) {
      c.tile = t;
      known = true;
    }
  }
  if (!known) refuse();
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
  if (ping_pong(c.tile) && c.split != GemmSplit::kDataParallel) refuse();
  return c;
}

std::vector<GemmConfig> gemm_config_candidates() {
  std::vector<GemmConfig> out;
  for (GemmTile tile : kTiles) {
    for (int swizzle : {1, 4}) {
      out.push_back({tile, GemmSplit::kDataParallel, 1, swizzle});
      if (ping_pong(tile)) continue;
      out.push_back({tile, GemmSplit::kStreamK, 1, swizzle});
      for (int splits : {2, 4, 8}) out.push_back({tile, GemmSplit::kSplitK, splits, swizzle});
    }
  }
  return out;
}

// Made from `tessera bench gemm --configs all` on an H200 (docs/PERF.md): few rows split K
// across the grid until it is about full; otherwise 128 x 256 tiles, whole tiles for short K
// loops (a split's reduction would cost more than it balances), stream-K for long ones, and
// rasterized in groups of 4 once there are several waves (L2 reuse).
GemmConfig choose_gemm_config(int64_t m, int64_t n, int64_t k, int sms) {
  TESSERA_CHECK_ARG(m >= 1 && n >= 1 && k >= 1 && sms >= 1, "choose_gemm_config: m ", m, ", n ", n,
                    ", k ", k, ", sms ", sms, ": expected each >= 1");
  if (m <= 128) {
    const int64_t tiles = (n + 127) / 128;
    if (tiles * 10 >= int64_t(sms) * 7) return {GemmTile::k128x128, GemmSplit::kDataParallel, 1, 4};
    int splits = 1;
    while (splits < 8 && tiles * splits * 2 * 10 <= int64_t(sms) * 11) splits *= 2;
    if (splits == 1) return {GemmTile::k128x128, GemmSplit::kStreamK, 1, 1};
    return {GemmTile::k128x128, GemmSplit::kSplitK, splits, 1};
  }
  const int64_t tiles = ((m + 255) / 256) * 2 * ((n + 255) / 256);  // clusters of 2 along M
  const int swizzle = tiles >= 4 * int64_t(sms) ? 4 : 1;
  if (k <= 3072) return {GemmTile::k128x256, GemmSplit::kDataParallel, 1, swizzle};
  return {GemmTile::k128x256, GemmSplit::kStreamK, 1, swizzle};
}

}  // namespace tessera::gemm
