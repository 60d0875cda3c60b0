#include "model/dit_ops.h"

#include <cmath>

#include "model/linear.h"
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
  for (float& v : x) v = v / (1.0f + std::exp(-v));
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

void head_rms_norm(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                   const std::vector<float>& weight, float eps) {
  if (rows == 0) return;
  const TensorView v = rows_view(x.data(), rows * heads, d);
  rms_norm(v, {}, vector_view(weight), eps, v, Stream::cpu());
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

}  // namespace tessera::model::dit
