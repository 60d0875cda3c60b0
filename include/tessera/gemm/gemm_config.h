// How the Hopper GEMM building block runs one problem: the CTA tile (each a compiled
// instantiation) and how the persistent grid shares the output tiles. The rule
// choose_gemm_config() picks one from the problem's shape and the device's multiprocessor
// count; `tessera bench gemm --configs all` measures every candidate beside cuBLASLt.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::gemm {

// Cooperative tiles (both consumer warp groups on one tile; any GemmSplit): 128 x 256 in
// clusters of 2 along M (B multicast), for many tiles; 128 x 128, 128 x 96 and 128 x 64 in
// clusters of 2 along N (A multicast), for few rows (128 x 64: twice the tiles of a narrow
// output, so one row tile's weights stream through more multiprocessors; 128 x 96: one row tile
// of an output that 128-wide tiles would spread over part of the grid only, as 12288 columns
// are 96 tiles of 128 on 132 multiprocessors and 128 of 96). Ping-pong tiles (the consumer warp
// groups alternate tiles, one's epilogue under the other's mainloop; data-parallel only), for short
// K loops: 64 x 256 and 128 x 128, clusters of 2 along M.
enum class GemmTile : uint8_t {
  k128x256,
  k128x128,
  k64x256PingPong,
  k128x128PingPong,
  k128x64,
  k128x96
};

// Data-parallel (whole output tiles per CTA), stream-K (the K loop of the tiles beyond the last
// full wave split over the grid), split-K into `splits` slices. Partial sums are reduced in a
// fixed order, so every mode is deterministic run to run.
enum class GemmSplit : uint8_t { kDataParallel, kStreamK, kSplitK };

struct GemmConfig {
  GemmTile tile = GemmTile::k128x256;
  GemmSplit split = GemmSplit::kDataParallel;
  int splits = 1;   // kSplitK: 2 to 16
  int swizzle = 1;  // tiles rasterized in groups of 1, 2, 4 or 8 (L2 reuse)
  bool operator==(const GemmConfig&) const = default;
};

// "128x256/dp/s1", "128x128/sk/s4", "128x256/k4/s1" (split-K into 4), "64x256pp/dp/s1".
std::string gemm_config_name(const GemmConfig& config);
// The inverse; throws kInvalidArgument naming `what` and the expected form.
GemmConfig parse_gemm_config(std::string_view text, std::string_view what);
// Throws kInvalidArgument naming `what` unless the configuration exists (parse's constraints).
void validate_gemm_config(const GemmConfig& config, std::string_view what);
// Every configuration the bench sweeps.
std::vector<GemmConfig> gemm_config_candidates();
// The rule: the configuration for an M x N x K problem on a device of `sms` multiprocessors.
GemmConfig choose_gemm_config(int64_t m, int64_t n, int64_t k, int sms);
// True where the sweep found cuBLASLt ahead of the rule's pick by more than 5%: Gemm's kAuto
// runs cuBLASLt there (the building block's gap at one row tile and on narrow outputs).
bool gemm_prefers_cublaslt(int64_t m, int64_t n, int64_t k);
// True where `bench gemm` found the skinny kernel (kSkinny) ahead of cuBLASLt: a few rows.
bool gemm_prefers_skinny(int64_t m, int64_t n, int64_t k);

}  // namespace tessera::gemm
