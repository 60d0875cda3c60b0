// A packed batch of new tokens: B sequences, each adding `num_tokens` rows after the `start`
// positions it already has in the KV cache, their rows concatenated in order ([T, C] with
// T = the sum). Prefill is start 0 with the prompt's length; decode is one token per sequence.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::model {

struct PackedSequence {
  int64_t seq_id = 0;      // the sequence's id in the PagedKvCache
  int64_t start = 0;       // position of its first new token (the tokens cached before)
  int64_t num_tokens = 0;  // its new rows
  int64_t first_row = 0;   // its first row in the packed batch
};

struct PackedBatch {
  std::vector<PackedSequence> sequences;
  std::vector<int32_t> positions;  // [T]: the position of every packed row

  int64_t total_tokens() const { return int64_t(positions.size()); }
};

}  // namespace tessera::model
