// CogVideoXBlock on the cpu backend (cogvideox_block.h).
#include "tessera/model/cogvideox_block.h"

#include <cmath>
#include <functional>

#include "model/dit_ops.h"
#include "model/random_weights.h"
#include "tessera/core/error.h"

namespace tessera::model {
namespace {

constexpr float kQkEps = 1e-6f;

using Source = std::function<std::vector<float>(const std::string& name, int64_t rows, int64_t cols)>;

CogVideoXBlockWeights load_block(const CogVideoXConfig& f, int64_t index, const Source& source) {
  const int64_t c = f.inner_dim(), d = f.attention_head_dim, t = f.time_embed_dim;
  TESSERA_CHECK_ARG(c >= 1 && d >= 1 && t >= 1,
                    "CogVideoX config: expected num_attention_heads, attention_head_dim and "
                    "time_embed_dim >= 1");
  const std::string p = "transformer_blocks." + std::to_string(index) + ".";
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    return LinearWeights{source(name + ".weight", out, in),
                         bias ? source(name + ".bias", out, 1) : std::vector<float>{}};
  };
  CogVideoXBlockWeights w;
  w.norm1 = linear(p + "norm1.linear", 6 * c, t, true);
  w.norm2 = linear(p + "norm2.linear", 6 * c, t, true);
  if (f.norm_elementwise_affine) {
    w.norm1_weight = source(p + "norm1.norm.weight", c, 1);
    w.norm1_bias = source(p + "norm1.norm.bias", c, 1);
    w.norm2_weight = source(p + "norm2.norm.weight", c, 1);
    w.norm2_bias = source(p + "norm2.norm.bias", c, 1);
  }
  w.q = linear(p + "attn1.to_q", c, c, f.attention_bias);
  w.k = linear(p + "attn1.to_k", c, c, f.attention_bias);
  w.v = linear(p + "attn1.to_v", c, c, f.attention_bias);
  w.out = linear(p + "attn1.to_out.0", c, c, true);
  w.norm_q_weight = source(p + "attn1.norm_q.weight", d, 1);
  w.norm_q_bias = source(p + "attn1.norm_q.bias", d, 1);
  w.norm_k_weight = source(p + "attn1.norm_k.weight", d, 1);
  w.norm_k_bias = source(p + "attn1.norm_k.bias", d, 1);
  w.ff_up = linear(p + "ff.net.0.proj", 4 * c, c, true);
  w.ff_down = linear(p + "ff.net.2", c, 4 * c, true);
  return w;
}

}  // namespace

CogVideoXBlockWeights random_cogvideox_block(const CogVideoXConfig& config, int64_t index,
                                             uint64_t seed) {
  return load_block(config, index, [&](const std::string& name, int64_t rows, int64_t cols) {
    const bool norm = name.find("norm") != std::string::npos && name.ends_with(".weight") &&
                      name.find("linear") == std::string::npos;
    const bool bias = name.ends_with(".bias");
    return random_tensor(seed, name, rows, cols, norm ? 1.0f : 0.0f,
                         norm || bias ? 0.1f : 1.0f / std::sqrt(float(cols)));
  });
}

CogVideoXBlockWeights load_cogvideox_block(const CogVideoXConfig& config, int64_t index,
                                           const WeightStore& store) {
  return load_block(config, index, [&](const std::string& name, int64_t rows, int64_t cols) {
    return whole_tensor(store, name, rows, cols);
  });
}

CogVideoXBlock::CogVideoXBlock(const CogVideoXConfig& config, CogVideoXBlockWeights weights,
                               sp::SpAttention& attention)
    : config_(config), w_(std::move(weights)), attention_(&attention) {
  c_ = config.inner_dim();
  heads_ = config.num_attention_heads;
  d_ = config.attention_head_dim;
  const sp::AttentionShape& s = attention.shape();
  TESSERA_CHECK_ARG(s.heads == heads_ && s.kv_heads == heads_ && s.head_dim == d_ &&
                        s.dtype == DType::kF32 && !s.causal && s.batch == 1,
                    "attention: planned for ", s.to_string(), ", expected batch 1, ", heads_,
                    " heads of ", d_, ", f32, not causal");
}

void CogVideoXBlock::forward(std::vector<float>& x, std::vector<float>& c,
                             const std::vector<float>& temb, const std::vector<float>& rope_cos,
                             const std::vector<float>& rope_sin) const {
  const int64_t rows = attention_->local_rows(), j = attention_->shape().joint_tokens;
  const int64_t t = config_.time_embed_dim;
  TESSERA_CHECK_ARG(int64_t(x.size()) == rows * c_ && int64_t(c.size()) == j * c_ &&
                        int64_t(temb.size()) == t,
                    "CogVideoXBlock::forward: x ", x.size(), ", c ", c.size(), ", temb ",
                    temb.size(), " values, expected ", rows, " x ", c_, ", ", j, " x ", c_,
                    " and ", t);
  const bool rope = !rope_cos.empty();
  TESSERA_CHECK_ARG(!rope || (int64_t(rope_cos.size()) == rows * d_ &&
                              rope_sin.size() == rope_cos.size()),
                    "rope_cos/rope_sin: expected ", rows, " x ", d_, " values each, or none");
  const float eps = float(config_.norm_eps);
  const std::vector<float> cond = dit::silu(temb);
  // [shift, scale, gate, enc_shift, enc_scale, enc_gate], each C wide.
  auto part = [&](const std::vector<float>& e, int i) { return e.data() + i * c_; };

  const std::vector<float> e1 = dit::dense(w_.norm1, cond, 1, t);
  const std::vector<float> nx =
      dit::norm_modulate(x, rows, c_, w_.norm1_weight, w_.norm1_bias, eps, part(e1, 0), part(e1, 1));
  const std::vector<float> nc =
      dit::norm_modulate(c, j, c_, w_.norm1_weight, w_.norm1_bias, eps, part(e1, 3), part(e1, 4));
  std::vector<float> qx = dit::dense(w_.q, nx, rows, c_), kx = dit::dense(w_.k, nx, rows, c_),
                     vx = dit::dense(w_.v, nx, rows, c_);
  std::vector<float> qc = dit::dense(w_.q, nc, j, c_), kc = dit::dense(w_.k, nc, j, c_),
                     vc = dit::dense(w_.v, nc, j, c_);
  for (std::vector<float>* q : {&qx, &qc}) {
    dit::head_layer_norm(*q, int64_t(q->size()) / c_, heads_, d_, w_.norm_q_weight,
                         w_.norm_q_bias, kQkEps);
  }
  for (std::vector<float>* k : {&kx, &kc}) {
    dit::head_layer_norm(*k, int64_t(k->size()) / c_, heads_, d_, w_.norm_k_weight,
                         w_.norm_k_bias, kQkEps);
  }
  if (rope) {
    dit::rotate_interleaved(qx, rows, heads_, d_, rope_cos, rope_sin);
    dit::rotate_interleaved(kx, rows, heads_, d_, rope_cos, rope_sin);
  }
  std::vector<float> ax(size_t(rows * c_)), ac(size_t(j * c_));
  auto view = [&](std::vector<float>& v, int64_t n) {
    return TensorView(v.data(), DType::kF32, Device::cpu(), {1, n, heads_, d_});
  };
  if (j > 0) {
    attention_->run(view(qx, rows), view(kx, rows), view(vx, rows), view(ax, rows), view(qc, j),
                    view(kc, j), view(vc, j), view(ac, j), Stream::cpu());
  } else {
    attention_->run(view(qx, rows), view(kx, rows), view(vx, rows), view(ax, rows), Stream::cpu());
  }
  dit::add_gated(x, dit::dense(w_.out, ax, rows, c_), part(e1, 2), c_);
  dit::add_gated(c, dit::dense(w_.out, ac, j, c_), part(e1, 5), c_);

  const std::vector<float> e2 = dit::dense(w_.norm2, cond, 1, t);
  const std::vector<float> mx =
      dit::norm_modulate(x, rows, c_, w_.norm2_weight, w_.norm2_bias, eps, part(e2, 0), part(e2, 1));
  const std::vector<float> mc =
      dit::norm_modulate(c, j, c_, w_.norm2_weight, w_.norm2_bias, eps, part(e2, 3), part(e2, 4));
  dit::add_gated(x, dit::gelu_mlp(w_.ff_up, w_.ff_down, mx, rows, c_), part(e2, 2), c_);
  dit::add_gated(c, dit::gelu_mlp(w_.ff_up, w_.ff_down, mc, j, c_), part(e2, 5), c_);
}

}  // namespace tessera::model
