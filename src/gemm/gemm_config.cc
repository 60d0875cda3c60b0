// Names of Hopper GEMM configurations and the rule that picks one (gemm_config.h).
#include "tessera/gemm/gemm_config.h"

#include <algorithm>
#include <charconv>
#include <iterator>

#include "tessera/core/error.h"

namespace tessera::gemm {

namespace {

constexpr GemmTile kTiles[] = {GemmTile::k128x256,        GemmTile::k128x128,
                               GemmTile::k128x96,         GemmTile::k128x64,
                               GemmTile::k64x256PingPong, GemmTile::k128x128PingPong};

const char* tile_name(GemmTile tile) {
  switch (tile) {
    case GemmTile::k128x256:
      return "128x256";
    case GemmTile::k128x128:
      return "128x128";
    case GemmTile::k128x96:
      return "128x96";
    case GemmTile::k128x64:
      return "128x64";
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

// The constraints every configuration meets (the kernels refuse the others at launch).
bool valid(const GemmConfig& c) {
  const bool tile_ok = std::find(std::begin(kTiles), std::end(kTiles), c.tile) != std::end(kTiles);
  const bool splits_ok =
      c.split == GemmSplit::kSplitK ? c.splits >= 2 && c.splits <= 16 : c.splits == 1;
  const bool swizzle_ok = c.swizzle == 1 || c.swizzle == 2 || c.swizzle == 4 || c.swizzle == 8;
  return tile_ok && splits_ok && swizzle_ok &&
         (!ping_pong(c.tile) || c.split == GemmSplit::kDataParallel);
}

int parse_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : -1;
}

// One row tile of `tiles` tiles: stream-K when under 70% of the grid would be busy, else whole
// tiles in groups of 4 (CUTLASS caps a group at the tile count of the shorter side, one here,
// so /s4 runs as /s1; the name stays as the sweep recorded it).
GemmConfig one_row_tile_config(GemmTile tile, int64_t tiles, int sms) {
  if (tiles * 10 < int64_t(sms) * 7) return {tile, GemmSplit::kStreamK, 1, 1};
  return {tile, GemmSplit::kDataParallel, 1, 4};
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
                    "': expected TILE/SPLIT/sSWIZZLE with TILE 128x256, 128x128, 128x96, 128x64 "
                    "(SPLIT dp, sk or k2..k16), 64x256pp or 128x128pp (SPLIT dp), SWIZZLE 1, 2, 4 "
                    "or 8 (e.g. 128x256/dp/s1)"));
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
  } else {
    refuse();
  }
  c.swizzle = swizzle.size() >= 2 && swizzle[0] == 's' ? parse_int(swizzle.substr(1)) : -1;
  if (!valid(c)) refuse();
  return c;
}

void validate_gemm_config(const GemmConfig& c, std::string_view what) {
  TESSERA_CHECK_ARG(valid(c), what, ": tile ", int(c.tile), ", split ", int(c.split), ", splits ",
                    c.splits, ", swizzle ", c.swizzle,
                    ": expected a known tile, splits 2 to 16 with split-K (else 1), swizzle 1, "
                    "2, 4 or 8, and data-parallel for the ping-pong tiles");
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

// Made from `tessera bench gemm --configs all` on an H200 (docs/PERF.md, bench/results/
// gemm_sweep_h200.json):
//   - one row tile (M <= 128), outputs of at most one wave of 128 x 64 tiles (bench gemm
//     --m 128 with the 128 x 64 tile, 2026-11-29, docs/PERF.md): 128 x 64 tiles, split K (at
//     most 4 ways, within one wave) when half the grid would idle and the K loop is long, else
//     stream-K when under 70% of the grid is busy, else whole tiles rasterized in groups of 4;
//   - one row tile, wider outputs: 128 x 96 tiles where their waves hold fewer columns than
//     128 x 128 tiles' (12288 columns in one full wave; ncu of cuBLASLt's kernels on an H100,
//     2026-12-06, docs/PERF.md: it fits its tile widths to the grid the same way), stream-K when
//     under 70% of the grid is busy, else whole tiles in groups of 4; otherwise 128 x 128
//     cooperative tiles: whole tiles when the columns fill most of the grid or the K loop is
//     short, else split K as above or stream-K;
//   - short K loops (<= 4096): 128 x 128 ping-pong (the epilogue hides under the other warp
//     group's mainloop);
//   - long K loops: 128 x 128 ping-pong when its tiles fill the last wave at least 3/4 full;
//     otherwise 128 x 256 on stream-K (which balances the last wave);
//   - rasterized in groups of 4 at 16384 rows and more (L2 reuse), else 1: stream-K with groups
//     and few column tiles lost half its speed.
GemmConfig choose_gemm_config(int64_t m, int64_t n, int64_t k, int sms) {
  TESSERA_CHECK_ARG(m >= 1 && n >= 1 && k >= 1 && sms >= 1, "choose_gemm_config: m ", m, ", n ", n,
                    ", k ", k, ", sms ", sms, ": expected each >= 1");
  if (m <= 128 && (n + 63) / 64 <= int64_t(sms)) {
    const int64_t tiles = (n + 63) / 64;
    if (k > 3072 && tiles * 2 <= int64_t(sms)) {
      const int splits = int(std::min<int64_t>(4, int64_t(sms) / tiles));
      return {GemmTile::k128x64, GemmSplit::kSplitK, splits, 1};
    }
    return one_row_tile_config(GemmTile::k128x64, tiles, sms);
  }
  if (m <= 128) {
    // 96-wide tiles where their waves hold fewer columns a multiprocessor than 128-wide ones':
    // 12288 columns are one full wave of 128 of them, or 96 tiles of 128 leaving a quarter of
    // 132 multiprocessors idle.
    const int64_t tiles96 = (n + 95) / 96, waves96 = (tiles96 + sms - 1) / sms;
    const int64_t tiles128 = (n + 127) / 128, waves128 = (tiles128 + sms - 1) / sms;
    if (waves96 * 96 < waves128 * 128) return one_row_tile_config(GemmTile::k128x96, tiles96, sms);
    const int64_t tiles = tiles128;
    if (k <= 3072 || tiles * 10 >= int64_t(sms) * 7) {
      return {GemmTile::k128x128, GemmSplit::kDataParallel, 1, 4};
    }
    int splits = 1;
    while (splits < 4 && tiles * splits * 2 <= int64_t(sms)) splits *= 2;
    if (splits == 1) return {GemmTile::k128x128, GemmSplit::kStreamK, 1, 1};
    return {GemmTile::k128x128, GemmSplit::kSplitK, splits, 1};
  }
  const int swizzle = m >= 16384 ? 4 : 1;
  if (k <= 4096) return {GemmTile::k128x128PingPong, GemmSplit::kDataParallel, 1, swizzle};
  const int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128), tail = tiles % sms;
  if (tail == 0 || tail * 4 >= int64_t(sms) * 3) {
    return {GemmTile::k128x128PingPong, GemmSplit::kDataParallel, 1, swizzle};
  }
  return {GemmTile::k128x256, GemmSplit::kStreamK, 1, 1};
}

bool gemm_prefers_skinny(int64_t m, int64_t n, int64_t k) {
  (void)n;
  (void)k;
  return m <= 4;  // bench gemm, llama3-8b shapes on H100: 1.05-1.7x at M 1-4, 0.69-0.75x at M 8
}

// Where the sweep found the rule's pick short of cuBLASLt by more than 5%: a single row tile
// (cuBLASLt's small-M kernels; ours reach 0.59x to 1.02x there), and narrow outputs (<= 2560
// columns) of up to 4096 rows with long K loops.
bool gemm_prefers_cublaslt(int64_t m, int64_t n, int64_t k) {
  return m <= 128 || (n <= 2560 && m <= 4096 && k > 4096);
}

}  // namespace tessera::gemm
