#include "gemm/reference_gemm.h"

namespace tessera::gemm::detail {

void gemm_tile(const void* a, int64_t lda, DType a_dtype, int64_t rows, const WeightOperand& b,
               int64_t col0, int64_t cols, std::vector<float>& scratch, float* acc) {
  const int64_t k = b.k;
  // b's tile transposed to [cols, k] and a's rows to [rows, k], both float32, so every dot
  // product runs over two contiguous rows.
  scratch.resize(size_t((cols + rows) * k));
  float* bt = scratch.data();
  float* at = bt + cols * k;
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t index = !b.weight_nk ? kk * b.n + col0 + j : (col0 + j) * k + kk;
      bt[j * k + kk] = load_as_float(b.data, b.dtype, index);
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t kk = 0; kk < k; ++kk) at[i * k + kk] = load_as_float(a, a_dtype, i * lda + kk);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const float* ar = at + i * k;
    for (int64_t j = 0; j < cols; ++j) {
      const float* br = bt + j * k;
      float sum = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) sum += ar[kk] * br[kk];
      acc[i * cols + j] = sum;
    }
  }
}

void store_tile(const float* acc, int64_t rows, int64_t cols, const void* bias, int64_t col0,
                DType dtype, void* dst, int64_t ldd) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float v = acc[i * cols + j];
      if (bias) v += load_as_float(bias, dtype, col0 + j);
      store_from_float(dst, dtype, i * ldd + j, v);
    }
  }
}

}  // namespace tessera::gemm::detail
