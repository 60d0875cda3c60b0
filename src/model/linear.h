// A float32 linear on the cpu backend through gemm::Gemm: out[M, N] = x[M, K] . W^T + bias,
// W [N, K] as Hugging Face stores it. M = 0 is a no-op.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/runtime/stream.h"

namespace tessera::model {

void linear(const float* x, int64_t rows, int64_t in_features, const std::vector<float>& weight,
            const std::vector<float>& bias, float* out, int64_t out_features, const Stream& stream);

}  // namespace tessera::model
