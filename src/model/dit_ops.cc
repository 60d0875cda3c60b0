#include "model/dit_ops.h"

#include <cmath>

#include "model/linear.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor_view.h"
#include "tessera/model/ops.h"

namespace tessera::model::dit {
namespace {

TensorView rows_view(const float* data, int64_t rows, int64_t cols) {
  return TensorView(const_cast<float*>(data), DType::kF32, Device::cpu(), {rows, cols});
}
TensorView vector_view(const std::vector<float>& v) {
  return v.empty() ? TensorView()
                   : TensorView(const_cast<float*>(v.data()), DType::kF32, Device::cpu(),
                                {int64_t(v.size())});
}

}  // namespace

std::vector<float> dense(const LinearWeights& l, const std::vector<float>& x, int64_t rows,
                         int64_t in) {
  const int64_t out_features = int64_t(l.weight.size()) / in;
  std::vector<float> out(size_t(rows * out_features));
  linear(x.data(), rows, in, l.weight, l.bias, out.data(), out_features, Stream::cpu());
  return out;
}

std::vector<float> silu(std::vector<float> x) {
  if (x.empty()) return x;
  const TensorView v = rows_view(x.data(), 1, int64_t(x.size()));
  model::silu(v, v, Stream::cpu());
  return x;
}

std::vector<float> norm_modulate(const std::vector<float>& x, int64_t rows, int64_t c,
                                 const std::vector<float>& weight, const std::vector<float>& bias,
                                 float eps, const float* shift, const float* scale) {
  std::vector<float> out(x.size());
  if (rows == 0) return out;
  const Stream s = Stream::cpu();
  layer_norm(rows_view(x.data(), rows, c), {}, vector_view(weight), vector_view(bias), eps,
             rows_view(out.data(), rows, c), s);
  const TensorView o(out.data(), DType::kF32, Device::cpu(), {1, rows, c});
  adaln_modulate(o, rows_view(shift, 1, c), rows_view(scale, 1, c), o, s);
  return out;
}

void add_gated(std::vector<float>& x, const std::vector<float>& y, const float* gate, int64_t c) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += gate[i % size_t(c)] * y[i];
}

std::vector<float> gelu_mlp(const LinearWeights& up, const LinearWeights& down,
                            const std::vector<float>& x, int64_t rows, int64_t c) {
  std::vector<float> h = dense(up, x, rows, c);
  const int64_t inner = int64_t(up.weight.size()) / c;
  if (rows > 0) {
    const TensorView v = rows_view(h.data(), rows, inner);
    gelu_tanh(v, v, Stream::cpu());
  }
  return dense(down, h, rows, inner);
}

void head_rms_norm_rotary(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                          const std::vector<float>& weight, float eps,
                          const std::vector<float>& cos_t, const std::vector<float>& sin_t) {
  if (rows == 0) return;
  const TensorView v(x.data(), DType::kF32, Device::cpu(), {rows, heads, d});
  model::head_rms_norm_rotary(v, vector_view(weight), eps, rows_view(cos_t.data(), rows, d),
                              rows_view(sin_t.data(), rows, d), v, Stream::cpu());
}

void head_layer_norm(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                     const std::vector<float>& weight, const std::vector<float>& bias, float eps) {
  if (rows == 0) return;
  const TensorView v = rows_view(x.data(), rows * heads, d);
  layer_norm(v, {}, vector_view(weight), vector_view(bias), eps, v, Stream::cpu());
}

void rotate_interleaved(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                        const std::vector<float>& cos_t, const std::vector<float>& sin_t) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* cs = cos_t.data() + t * d;
    const float* sn = sin_t.data() + t * d;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data() + (t * heads + h) * d;
      for (int64_t j = 0; j < d; j += 2) {
        const float a = v[j], b = v[j + 1];
        v[j] = a * cs[j] + (-b) * sn[j];
        v[j + 1] = b * cs[j + 1] + a * sn[j + 1];
      }
    }
  }
}

std::vector<float> timestep_sinusoid(float t) {
  constexpr int kHalf = 128;
  std::vector<float> e(2 * kHalf);
  const float scaled = t * 1000.0f;
  for (int i = 0; i < kHalf; ++i) {
    const float f = std::exp(-std::log(10000.0f) * float(i) / float(kHalf));
    e[size_t(i)] = std::cos(scaled * f);
    e[size_t(kHalf + i)] = std::sin(scaled * f);
  }
  return e;
}

void check_flux(const FluxConfig& config, const FluxDitShape& shape) {
  int64_t axes_sum = 0;
  for (int64_t a : config.axes_dims_rope) {
    TESSERA_CHECK_ARG(a >= 2 && a % 2 == 0, "axes_dims_rope: ", a, ": expected even dims >= 2");
    axes_sum += a;
  }
  TESSERA_CHECK_ARG(config.axes_dims_rope.size() == 3 && axes_sum == config.attention_head_dim,
                    "axes_dims_rope: expected 3 axes summing to attention_head_dim = ",
                    config.attention_head_dim);
  TESSERA_CHECK_ARG(shape.image_tokens >= 1 && shape.text_tokens >= 0,
                    "shape: image_tokens = ", shape.image_tokens, ", text_tokens = ",
                    shape.text_tokens, ": expected >= 1 and >= 0");
  TESSERA_CHECK_ARG(shape.grid_width >= 1 && shape.image_tokens % shape.grid_width == 0,
                    "shape.grid_width = ", shape.grid_width, ": expected a divisor of the ",
                    shape.image_tokens, " image tokens");
}

void flux_rope_tables(const std::vector<int64_t>& tokens, int64_t grid_width,
                      const std::vector<int64_t>& axes, std::vector<float>& cos_out,
                      std::vector<float>& sin_out) {
  int64_t d = 0;
  for (int64_t a : axes) d += a;
  cos_out.assign(tokens.size() * size_t(d), 0.0f);
  sin_out.assign(tokens.size() * size_t(d), 0.0f);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int64_t ids[3] = {0, tokens[t] / grid_width, tokens[t] % grid_width};
    int64_t dim0 = 0;
    for (size_t axis = 0; axis < axes.size() && axis < 3; ++axis) {
      const int64_t di = axes[axis];
      for (int64_t j = 0; j < di / 2; ++j) {
        const double freq = 1.0 / std::pow(10000.0, double(2 * j) / double(di));
        const double angle = double(ids[axis]) * freq;
        for (int64_t e : {dim0 + 2 * j, dim0 + 2 * j + 1}) {
          cos_out[t * size_t(d) + size_t(e)] = float(std::cos(angle));
          sin_out[t * size_t(d) + size_t(e)] = float(std::sin(angle));
        }
      }
      dim0 += di;
    }
  }
}

}  // namespace tessera::model::dit
