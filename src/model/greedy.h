// Internal: greedy generation over any model with add_sequence / release_sequence, shared by
// LlamaModel (cpu) and LlamaGpuModel (cuda).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/model/llama_model.h"

namespace tessera::model::detail {

// Prefill `prompt` in a new sequence, then feed back `steps` tokens; `next_token(input)` runs
// one forward of `input` and returns its next token. The sequence is released at the end, also
// when a step throws. `what` names the caller in errors.
template <typename Model, typename NextToken>
std::vector<int32_t> generate_greedy(Model& model, const std::vector<int32_t>& prompt,
                                     int64_t steps, const char* what, NextToken&& next_token) {
  TESSERA_CHECK_ARG(!prompt.empty(), what, ": prompt: expected >= 1 token");
  TESSERA_CHECK_ARG(steps >= 0, what, ": steps = ", steps, ": expected >= 0");
  const int64_t seq = model.add_sequence();
  std::vector<int32_t> generated;
  SequenceTokens input{seq, prompt};
  try {
    for (int64_t step = 0; step < steps; ++step) {
      const int32_t token = next_token(std::span<const SequenceTokens>(&input, 1));
      generated.push_back(token);
      input.tokens = {token};
    }
  } catch (...) {
    model.release_sequence(seq);
    throw;
  }
  model.release_sequence(seq);
  return generated;
}

}  // namespace tessera::model::detail
