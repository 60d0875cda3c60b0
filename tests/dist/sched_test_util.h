// What the scheduler tests (sched_test.cc, sched_rule_test.cc) share: a packed batch of given
// sequence lengths, and one prefill then one decode step of the tiny Llama under a strategy.
#pragma once

#include <cstdint>
#include <vector>

#include "../unit/llama_test_util.h"
#include "tessera/model/llama_model.h"
#include "tessera/model/packed_batch.h"
#include "tessera/sched/schedule.h"

namespace tessera::testing {

// Sequences i = 0.. of lengths[i] new tokens from position 0, rows packed in order.
inline model::PackedBatch batch_of(const std::vector<int64_t>& lengths) {
  model::PackedBatch b;
  for (size_t i = 0; i < lengths.size(); ++i) {
    b.sequences.push_back({int64_t(i), 0, lengths[i], b.total_tokens()});
    for (int64_t p = 0; p < lengths[i]; ++p) b.positions.push_back(int32_t(p));
  }
  return b;
}

// Prefill of four sequences (lengths 5, 9, 3 and, to cross NanoFlow's threshold, 70), then one
// decode step for all: the logits of both calls (strategy null: the plain forward).
inline std::vector<std::vector<float>> prefill_then_decode(model::LlamaModel& m,
                                                           const sched::Strategy* strategy) {
  std::vector<model::SequenceTokens> in;
  int salt = 0;
  for (int64_t n : {5, 9, 3, 70}) in.push_back({m.add_sequence(), test_tokens(n, ++salt)});
  std::vector<std::vector<float>> out;
  out.push_back(strategy ? m.forward(in, *strategy) : m.forward(in));
  for (auto& s : in) s.tokens = {int32_t((s.seq_id * 7 + 1) % 97)};
  out.push_back(strategy ? m.forward(in, *strategy) : m.forward(in));
  return out;
}

}  // namespace tessera::testing
