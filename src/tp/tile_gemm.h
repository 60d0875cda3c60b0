// The cpu backend's GEMM: one output tile at a time, in float32, k ascending (so a tile's
// result does not depend on the tile shape or on which rank computes it).
//   acc[i, j] = sum_k a[i, k] * b[k, col0 + j]        i < rows, j < cols
// `a` points at the tile's first row (row pitch lda elements); b is the logical [K, N] operand
// stored as [K, N] (kKN) or [N, K] (kNK).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/tp/request.h"

namespace tessera::tp::detail {

struct WeightOperand {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  WeightLayout layout = WeightLayout::kKN;
  int64_t k = 0, n = 0;  // logical shape [k, n]
};

// Fills acc [rows, cols] (float32, row-major). `scratch` is reused between calls.
void gemm_tile(const void* a, int64_t lda, DType a_dtype, int64_t rows, const WeightOperand& b,
               int64_t col0, int64_t cols, std::vector<float>& scratch, float* acc);

// dst[i * ldd + j] = round(acc[i, j] + bias[col0 + j]) in dst_dtype (bias may be null).
void store_tile(const float* acc, int64_t rows, int64_t cols, const void* bias, int64_t col0,
                DType dtype, void* dst, int64_t ldd);

}  // namespace tessera::tp::detail
