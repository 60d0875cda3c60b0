// The float64 steps the decode references share (reference.cc for grouped attention,
// latent_reference.cc for MLA): a weight times the batch's rows, RMSNorm of a row, and the two
// RoPE pairings. Weights are read through cpu::load_row, so one step converts each weight row
// once for the whole batch. Tensors on the cpu.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "decode/cpu_cache.h"
#include "tessera/core/dtype.h"
#include "tessera/core/tensor_view.h"

namespace tessera::decode::ref {

// y[b][r] = sum_c W[r][c] x[b][c] for the batch's rows x (each `cols` long), in float64.
inline std::vector<double> matmul_rows(const TensorView& w, const std::vector<double>& x,
                                       int64_t batch) {
  const int64_t rows = w.size(0), cols = w.size(1);
  std::vector<double> y(static_cast<size_t>(batch * rows));
  std::vector<float> wrow(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    cpu::load_row(w, r, wrow.data());
    for (int64_t b = 0; b < batch; ++b) {
      const double* xb = x.data() + b * cols;
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += double(wrow[c]) * xb[c];
      y[size_t(b * rows + r)] = acc;
    }
  }
  return y;
}

// The batch's rows of x [B, n] in float64.
inline std::vector<double> load_rows(const TensorView& x) {
  std::vector<double> rows(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) rows[size_t(i)] = load_as_float(x.data(), x.dtype(), i);
  return rows;
}

// row[i] = row[i] / sqrt(mean(row^2) + eps) * weight[i] for i < n, in place; weight [n].
inline void rms_norm(double* row, int64_t n, const TensorView& weight, float eps) {
  double sumsq = 0;
  for (int64_t i = 0; i < n; ++i) sumsq += row[i] * row[i];
  const double rstd = 1.0 / std::sqrt(sumsq / double(n) + double(eps));
  for (int64_t i = 0; i < n; ++i) row[i] *= rstd * load_as_float(weight.data(), weight.dtype(), i);
}

// Rotate-half RoPE (Llama, Hugging Face's rotate_half) of one d-wide head in place at `pos`:
// (x_i, x_{i+d/2}) rotated by pos * inv_freq_i.
inline void rope_halves(double* head, int64_t d, int64_t pos, const std::vector<float>& inv_freq) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double angle = double(pos) * double(inv_freq[size_t(i)]);
    const double c = std::cos(angle), s = std::sin(angle);
    const double x0 = head[i], x1 = head[i + d / 2];
    head[i] = x0 * c - x1 * s;
    head[i + d / 2] = x1 * c + x0 * s;
  }
}

// Interleaved RoPE (DeepSeek, GPT-J style) of one d-wide head in place at `pos`:
// (x_{2i}, x_{2i+1}) rotated by pos * inv_freq_i.
inline void rope_pairs(double* head, int64_t d, int64_t pos, const std::vector<float>& inv_freq) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double angle = double(pos) * double(inv_freq[size_t(i)]);
    const double c = std::cos(angle), s = std::sin(angle);
    const double x0 = head[2 * i], x1 = head[2 * i + 1];
    head[2 * i] = x0 * c - x1 * s;
    head[2 * i + 1] = x1 * c + x0 * s;
  }
}

}  // namespace tessera::decode::ref
