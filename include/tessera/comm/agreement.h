// Checks that every rank of a group agrees on something (the same plan, the same signal
// slots) before any data moves: each rank gathers every rank's words and compares.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/comm/context.h"

namespace tessera {

// FNV-1a of `text` (e.g. a plan's JSON).
uint64_t fingerprint(std::string_view text);

// Collective over the context's bootstrap (cuda ranks) or world communicator (cpu ranks):
// every rank's `words` (the same count everywhere), rank-major ([P][words.size()]). Blocks the
// host; for construction, not the hot path.
std::vector<uint64_t> all_gather_words(RankContext& ctx, std::span<const uint64_t> words);

}  // namespace tessera
