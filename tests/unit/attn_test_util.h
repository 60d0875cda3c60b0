// Helpers of the attention reference tests: random and filled cpu tensors, element access by
// index, and the naive double-precision attention the references are checked against.
#pragma once

#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "tessera/attn/attention.h"
#include "tessera/core/buffer.h"

namespace tessera::attn {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

inline Tensor random_tensor(std::vector<int64_t> shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.view().numel(); ++i) store_from_float(t.data(), dtype, i, dist(rng));
  return t;
}

inline Tensor filled(std::vector<int64_t> shape, DType dtype, float value) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  for (int64_t i = 0; i < t.view().numel(); ++i) store_from_float(t.data(), dtype, i, value);
  return t;
}

inline float at4(const TensorView& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return load_as_float(t.data(), t.dtype(),
                       a * t.stride(0) + b * t.stride(1) + c * t.stride(2) + d * t.stride(3));
}
inline float at3(const TensorView& t, int64_t a, int64_t b, int64_t c) {
  return load_as_float(t.data(), t.dtype(), a * t.stride(0) + b * t.stride(1) + c * t.stride(2));
}

// Naive double-precision attention over one KV tensor with a mask: o [B,Lq,Hq,D], lse [B,Hq,Lq].
struct Naive {
  std::vector<double> o, lse;
};
inline Naive naive(const TensorView& q, const TensorView& k, const TensorView& v,
                   const MaskSpec& mask, double scale) {
  const int64_t B = q.size(0), Lq = q.size(1), Hq = q.size(2), D = q.size(3);
  const int64_t Lkv = k.size(1), Hkv = k.size(2);
  Naive n;
  n.o.assign(size_t(B * Lq * Hq * D), 0.0);
  n.lse.assign(size_t(B * Hq * Lq), -INFINITY);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> s(size_t(Lkv), -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j < Lkv; ++j) {
          if (mask.masked(i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(at4(q, b, i, h, d)) * at4(k, b, j, h / (Hq / Hkv), d);
          s[size_t(j)] = dot * scale;
          m = std::max(m, s[size_t(j)]);
        }
        if (m == -INFINITY) continue;
        double sum = 0;
        for (int64_t j = 0; j < Lkv; ++j) sum += std::exp(s[size_t(j)] - m);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < Lkv; ++j)
            acc += std::exp(s[size_t(j)] - m) * at4(v, b, j, h / (Hq / Hkv), d);
          n.o[size_t(((b * Lq + i) * Hq + h) * D + d)] = acc / sum;
        }
        n.lse[size_t((b * Hq + h) * Lq + i)] = m + std::log(sum);
      }
  return n;
}

// max |o - naive| and max |lse - naive| (infinities must match exactly).
inline std::pair<double, double> max_errors(const TensorView& o, const TensorView& lse,
                                            const Naive& n) {
  const int64_t B = o.size(0), Lq = o.size(1), Hq = o.size(2), D = o.size(3);
  double eo = 0, el = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          double x = at4(o, b, i, h, d);
          if (!std::isfinite(x)) return {INFINITY, INFINITY};
          eo = std::max(eo, std::abs(x - n.o[size_t(((b * Lq + i) * Hq + h) * D + d)]));
        }
        double l = at3(lse, b, h, i), want = n.lse[size_t((b * Hq + h) * Lq + i)];
        if (std::isinf(want) || std::isinf(l)) {
          if (l != want) return {eo, INFINITY};
        } else {
          el = std::max(el, std::abs(l - want));
        }
      }
  return {eo, el};
}

}  // namespace tessera::attn
