// The random weights every model's loader draws when no checkpoint is given: each tensor from
// its own stream, seeded by the seed and the tensor's (Hugging Face or diffusers) name, so every
// rank and every tensor-parallel degree sees the same model, on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/model/weight_store.h"

namespace tessera::model {

// rows x cols values center + scale * u, u uniform in [-1, 1) from 24 random bits (exact in
// float, unlike std's distributions, which differ between standard libraries).
std::vector<float> random_tensor(uint64_t seed, const std::string& name, int64_t rows,
                                 int64_t cols, float center, float scale);

// A whole tensor of `store`, checked to be [rows, cols] ([rows] when cols is 1), widened to
// float32 (errors name the tensor).
std::vector<float> whole_tensor(const WeightStore& store, const std::string& name, int64_t rows,
                                int64_t cols);

}  // namespace tessera::model
