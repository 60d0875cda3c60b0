// The attention block of one decode step computed plainly in float64 (attention_block.h
// states the math): the cpu backend's unfused path and what every other path is checked
// against. Only the values a model stores are rounded to the dtype: the new K and V appended
// to the cache (and then attended as stored) and the output. Tensors on the cpu.
#pragma once

#include <cstdint>

#include "tessera/decode/attention_block.h"

namespace tessera::decode {

// Writes step.out (in its own dtype: f32 keeps the reference unrounded) and appends the new K/V to the cache at positions[b]. positions must already
// be checked against the cache's capacity; page indices are checked here.
void reference_attention_block(const ModelConfig& model, const DecodeStep& step,
                               const AttentionWeights& weights, const KvCache& cache,
                               int64_t page_size);

}  // namespace tessera::decode
