// The float32 references of the layer operations (ops.h): plain loops over strided views,
// float32 arithmetic, one rounding per output element. They are what the cpu backend runs and
// what the cuda kernels are tested against.
#include "model/ops_reference.h"

#include <cmath>
#include <vector>

namespace tessera::model::detail {

namespace {

// Element (i, j) of a [N, C] rows view, as float / stored from float.
float at(const TensorView& t, int64_t i, int64_t j) {
  return load_as_float(t.data(), t.dtype(), i * t.stride(0) + j);
}
void put(const TensorView& t, int64_t i, int64_t j, float v) {
  store_from_float(t.data(), t.dtype(), i * t.stride(0) + j, v);
}

int64_t id_at(const TensorView& ids, int64_t n) {
  return ids.dtype() == DType::kI64 ? ids.data_as<int64_t>()[n * ids.stride(0)]
                                    : ids.data_as<int32_t>()[n * ids.stride(0)];
}

// Row i of h = x (+ residual.in, rounded and written to residual.out) as float32.
void residual_row(const TensorView& x, const Residual& residual, int64_t i, std::vector<float>& h) {
  const int64_t c_size = x.size(1);
  for (int64_t c = 0; c < c_size; ++c) {
    float v = at(x, i, c);
    if (!residual.in.empty()) {
      v = round_to_dtype(x.dtype(), v + at(residual.in, i, c));
      put(residual.out, i, c, v);
    }
    h[size_t(c)] = v;
  }
}

}  // namespace

void reference_rms_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                        float eps, const TensorView& out) {
  const int64_t n_rows = x.size(0), c_size = x.size(1);
  std::vector<float> h(static_cast<size_t>(c_size));
  for (int64_t i = 0; i < n_rows; ++i) {
    residual_row(x, residual, i, h);
    float sum_sq = 0;
    for (float v : h) sum_sq += v * v;
    const float inv_rms = 1.0f / std::sqrt(sum_sq / float(c_size) + eps);
    for (int64_t c = 0; c < c_size; ++c)
      put(out, i, c, h[size_t(c)] * inv_rms * load_as_float(weight.data(), weight.dtype(), c));
  }
}

void reference_layer_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                          const TensorView& bias, float eps, const TensorView& out) {
  const int64_t n_rows = x.size(0), c_size = x.size(1);
  std::vector<float> h(static_cast<size_t>(c_size));
  for (int64_t i = 0; i < n_rows; ++i) {
    residual_row(x, residual, i, h);
    float sum = 0;
    for (float v : h) sum += v;
    const float mean = sum / float(c_size);
    float sum_sq = 0;  // two passes: no cancellation for rows far from zero mean
    for (float v : h) sum_sq += (v - mean) * (v - mean);
    const float inv_std = 1.0f / std::sqrt(sum_sq / float(c_size) + eps);
    for (int64_t c = 0; c < c_size; ++c) {
      float y = (h[size_t(c)] - mean) * inv_std;
      if (!weight.empty()) y *= load_as_float(weight.data(), weight.dtype(), c);
      if (!bias.empty()) y += load_as_float(bias.data(), bias.dtype(), c);
      put(out, i, c, y);
    }
  }
}

void reference_rope(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
                    const TensorView& out) {
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  const int64_t half = inv_freq.size(0);
  const float* freq = inv_freq.data_as<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    const float pos = float(id_at(positions, t));
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t xo = t * x.stride(0) + h * x.stride(1),
                    oo = t * out.stride(0) + h * out.stride(1);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * freq[i * inv_freq.stride(0)];
        const float c = float(std::cos(double(angle))), s = float(std::sin(double(angle)));
        const float a = load_as_float(x.data(), x.dtype(), xo + i);
        const float b = load_as_float(x.data(), x.dtype(), xo + i + half);
        store_from_float(out.data(), out.dtype(), oo + i, a * c - b * s);
        store_from_float(out.data(), out.dtype(), oo + i + half, b * c + a * s);
      }
      for (int64_t d = 2 * half; d < dim; ++d)
        store_from_float(out.data(), out.dtype(), oo + d,
                         load_as_float(x.data(), x.dtype(), xo + d));
    }
  }
}

void reference_silu_and_mul(const TensorView& gate, const TensorView& up, const TensorView& out) {
  for (int64_t i = 0; i < gate.size(0); ++i)
    for (int64_t c = 0; c < gate.size(1); ++c) {
      const float g = at(gate, i, c);
      put(out, i, c, g / (1.0f + std::exp(-g)) * at(up, i, c));
    }
}

void reference_gelu_tanh(const TensorView& x, const TensorView& out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t c = 0; c < x.size(1); ++c) {
      const float v = at(x, i, c);
      put(out, i, c, 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v))));
    }
}

void reference_adaln_modulate(const TensorView& x, const TensorView& shift, const TensorView& scale,
                              const TensorView& out) {
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t l = 0; l < x.size(1); ++l)
      for (int64_t c = 0; c < x.size(2); ++c) {
        const float v = load_as_float(x.data(), x.dtype(), b * x.stride(0) + l * x.stride(1) + c);
        const float y = v * (1.0f + at(scale, b, c)) + at(shift, b, c);
        store_from_float(out.data(), out.dtype(), b * out.stride(0) + l * out.stride(1) + c, y);
      }
}

void reference_gated_add(const TensorView& x, const TensorView& y, const TensorView& gate,
                         const TensorView& out) {
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t l = 0; l < x.size(1); ++l)
      for (int64_t c = 0; c < x.size(2); ++c) {
        const float v = load_as_float(x.data(), x.dtype(), b * x.stride(0) + l * x.stride(1) + c);
        const float w = load_as_float(y.data(), y.dtype(), b * y.stride(0) + l * y.stride(1) + c);
        store_from_float(out.data(), out.dtype(), b * out.stride(0) + l * out.stride(1) + c,
                         v + at(gate, b, c) * w);
      }
}

void reference_silu(const TensorView& x, const TensorView& out) {
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t c = 0; c < x.size(1); ++c) {
      const float v = at(x, i, c);
      put(out, i, c, v / (1.0f + std::exp(-v)));
    }
}

void reference_head_rms_norm_rotary(const TensorView& x, const TensorView& weight, float eps,
                                    const TensorView& cos, const TensorView& sin,
                                    const TensorView& out) {
  const int64_t d = x.size(2);
  std::vector<float> n(size_t(d), 0.0f);
  for (int64_t t = 0; t < x.size(0); ++t)
    for (int64_t h = 0; h < x.size(1); ++h) {
      const int64_t in_row = t * x.stride(0) + h * x.stride(1);
      float sum_sq = 0;
      for (int64_t e = 0; e < d; ++e) {
        n[size_t(e)] = load_as_float(x.data(), x.dtype(), in_row + e);
        sum_sq += n[size_t(e)] * n[size_t(e)];
      }
      const float inv_rms = 1.0f / std::sqrt(sum_sq / float(d) + eps);
      for (int64_t e = 0; e < d; ++e)
        n[size_t(e)] = n[size_t(e)] * inv_rms * load_as_float(weight.data(), weight.dtype(), e);
      const int64_t out_row = t * out.stride(0) + h * out.stride(1);
      for (int64_t e = 0; e < d; e += 2) {
        float a = n[size_t(e)], b = n[size_t(e + 1)];
        if (!cos.empty()) {
          const float c0 = at(cos, t, e), c1 = at(cos, t, e + 1);
          const float s0 = at(sin, t, e), s1 = at(sin, t, e + 1);
          const float ra = a * c0 - b * s0, rb = b * c1 + a * s1;
          a = ra;
          b = rb;
        }
        store_from_float(out.data(), out.dtype(), out_row + e, a);
        store_from_float(out.data(), out.dtype(), out_row + e + 1, b);
      }
    }
}

void reference_embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  for (int64_t n = 0; n < ids.size(0); ++n) {
    const int64_t row = id_at(ids, n);
    for (int64_t c = 0; c < table.size(1); ++c) put(out, n, c, at(table, row, c));
  }
}

void reference_scatter_rows(const TensorView& src, const TensorView& ids, const TensorView& table) {
  for (int64_t n = 0; n < ids.size(0); ++n) {
    const int64_t row = id_at(ids, n);
    for (int64_t c = 0; c < src.size(1); ++c) put(table, row, c, at(src, n, c));
  }
}

void reference_argmax(const TensorView& logits, const TensorView& out) {
  for (int64_t n = 0; n < logits.size(0); ++n) {
    int64_t best = 0;
    float best_value = at(logits, n, 0);
    for (int64_t v = 1; v < logits.size(1); ++v) {
      const float value = at(logits, n, v);
      // Strictly better only: the lowest index wins among equals (and among NaNs).
      if (!std::isnan(best_value) && (std::isnan(value) || value > best_value)) {
        best = v;
        best_value = value;
      }
    }
    if (out.dtype() == DType::kI64)
      out.data_as<int64_t>()[n * out.stride(0)] = best;
    else
      out.data_as<int32_t>()[n * out.stride(0)] = int32_t(best);
  }
}

}  // namespace tessera::model::detail
