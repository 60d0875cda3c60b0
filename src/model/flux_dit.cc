// FluxDit on the cpu backend (flux_dit.h): float32 layer code through model ops and the cpu
// linear, attention through sp::SpAttention.
#include "tessera/model/flux_dit.h"

#include <algorithm>
#include <cmath>

#include "model/dit_ops.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"

namespace tessera::model {
namespace {

constexpr float kEps = 1e-6f;

using dit::add_gated;
using dit::silu;

// Every Flux linear has a bias: its width is the bias's.
std::vector<float> apply(const LinearWeights& l, const std::vector<float>& x, int64_t rows) {
  return dit::dense(l, x, rows, int64_t(l.weight.size() / l.bias.size()));
}

// layer_norm (no affine) of `rows` rows, then * (1 + scale) + shift.
std::vector<float> modulated_norm(const std::vector<float>& x, int64_t rows, int64_t c,
                                  const float* shift, const float* scale) {
  return dit::norm_modulate(x, rows, c, {}, {}, kEps, shift, scale);
}

std::vector<float> feed_forward(const LinearWeights& up, const LinearWeights& down,
                                const std::vector<float>& x, int64_t rows) {
  return dit::gelu_mlp(up, down, x, rows, int64_t(up.weight.size() / up.bias.size()));
}

}  // namespace

FluxDit::FluxDit(const FluxConfig& config, FluxDitWeights weights, RankContext& ctx,
                 const FluxDitShape& shape, const sp::PlanOptions& sp_options)
    : config_(config), w_(std::move(weights)), shape_(shape) {
  TESSERA_CHECK(ctx.backend == Backend::kCpu, ErrorCode::kUnsupported,
                "FluxDit: the ", backend_name(ctx.backend),
                " backend: only the cpu layer code is built; expected a cpu context");
  c_ = config.inner_dim();
  heads_ = config.num_attention_heads;
  d_ = config.attention_head_dim;
  dit::check_flux(config, shape);
  TESSERA_CHECK_ARG(int64_t(w_.double_blocks.size()) == config.num_layers &&
                        int64_t(w_.single_blocks.size()) == config.num_single_layers,
                    "weights: ", w_.double_blocks.size(), " double and ", w_.single_blocks.size(),
                    " single blocks, expected num_layers = ", config.num_layers,
                    " and num_single_layers = ", config.num_single_layers);
  attention_ = sp::SpAttention::create(
      ctx, sp::joint_attention_request(shape.image_tokens, shape.text_tokens, heads_, d_,
                                       DType::kF32, sp_options));
  local_tokens_ = attention_->local_sequence_tokens();
  rows_ = int64_t(local_tokens_.size());
  std::vector<int64_t> text_tokens;  // text ids are (0, 0, 0): the image token 0's
  text_tokens.assign(size_t(shape.text_tokens), 0);
  dit::flux_rope_tables(text_tokens, shape.grid_width, config.axes_dims_rope, cos_t_, sin_t_);
  dit::flux_rope_tables(local_tokens_, shape.grid_width, config.axes_dims_rope, cos_x_, sin_x_);
}

FluxDit::~FluxDit() = default;

void FluxDit::attend(std::vector<float>& qt, std::vector<float>& kt, std::vector<float>& vt,
                     std::vector<float>& qx, std::vector<float>& kx, std::vector<float>& vx,
                     const std::vector<float>& norm_q, const std::vector<float>& norm_k,
                     const std::vector<float>& norm_added_q,
                     const std::vector<float>& norm_added_k, std::vector<float>& out_t,
                     std::vector<float>& out_x) const {
  const int64_t j = shape_.text_tokens;
  dit::head_rms_norm_rotary(qt, j, heads_, d_, norm_added_q, kEps, cos_t_, sin_t_);
  dit::head_rms_norm_rotary(kt, j, heads_, d_, norm_added_k, kEps, cos_t_, sin_t_);
  dit::head_rms_norm_rotary(qx, rows_, heads_, d_, norm_q, kEps, cos_x_, sin_x_);
  dit::head_rms_norm_rotary(kx, rows_, heads_, d_, norm_k, kEps, cos_x_, sin_x_);
  out_t.assign(size_t(j * c_), 0.0f);
  out_x.assign(size_t(rows_ * c_), 0.0f);
  auto view = [&](std::vector<float>& v, int64_t rows) {
    return TensorView(v.data(), DType::kF32, Device::cpu(), {1, rows, heads_, d_});
  };
  if (j > 0) {
    attention_->run(view(qx, rows_), view(kx, rows_), view(vx, rows_), view(out_x, rows_),
                    view(qt, j), view(kt, j), view(vt, j), view(out_t, j), Stream::cpu());
  } else {
    attention_->run(view(qx, rows_), view(kx, rows_), view(vx, rows_), view(out_x, rows_),
                    Stream::cpu());
  }
}

void FluxDit::double_block(const FluxDoubleBlockWeights& w, const std::vector<float>& cond,
                           std::vector<float>& x, std::vector<float>& c) const {
  const int64_t j = shape_.text_tokens;
  // [shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp], each C wide.
  const std::vector<float> ex = apply(w.norm1, cond, 1), ec = apply(w.norm1_context, cond, 1);
  auto part = [&](const std::vector<float>& e, int i) { return e.data() + i * c_; };
  const std::vector<float> nx = modulated_norm(x, rows_, c_, part(ex, 0), part(ex, 1));
  const std::vector<float> nc = modulated_norm(c, j, c_, part(ec, 0), part(ec, 1));
  const FluxAttentionWeights& a = w.attn;
  std::vector<float> qx = apply(a.q, nx, rows_), kx = apply(a.k, nx, rows_), vx = apply(a.v, nx, rows_);
  std::vector<float> qt = apply(a.add_q, nc, j), kt = apply(a.add_k, nc, j), vt = apply(a.add_v, nc, j);
  std::vector<float> at, ax;
  attend(qt, kt, vt, qx, kx, vx, a.norm_q, a.norm_k, a.norm_added_q, a.norm_added_k, at, ax);
  add_gated(x, apply(a.out, ax, rows_), part(ex, 2), c_);
  add_gated(x, feed_forward(w.ff_up, w.ff_down, modulated_norm(x, rows_, c_, part(ex, 3), part(ex, 4)), rows_),
            part(ex, 5), c_);
  add_gated(c, apply(a.add_out, at, j), part(ec, 2), c_);
  add_gated(c, feed_forward(w.ff_context_up, w.ff_context_down,
                            modulated_norm(c, j, c_, part(ec, 3), part(ec, 4)), j),
            part(ec, 5), c_);
}

void FluxDit::single_block(const FluxSingleBlockWeights& w, const std::vector<float>& cond,
                           std::vector<float>& x, std::vector<float>& c) const {
  const int64_t j = shape_.text_tokens;
  const std::vector<float> e = apply(w.norm, cond, 1);  // [shift, scale, gate]
  const float* shift = e.data();
  const float* scale = e.data() + c_;
  const float* gate = e.data() + 2 * c_;
  const std::vector<float> nx = modulated_norm(x, rows_, c_, shift, scale);
  const std::vector<float> nc = modulated_norm(c, j, c_, shift, scale);
  const FluxAttentionWeights& a = w.attn;
  std::vector<float> qx = apply(a.q, nx, rows_), kx = apply(a.k, nx, rows_), vx = apply(a.v, nx, rows_);
  std::vector<float> qt = apply(a.q, nc, j), kt = apply(a.k, nc, j), vt = apply(a.v, nc, j);
  std::vector<float> at, ax;
  attend(qt, kt, vt, qx, kx, vx, a.norm_q, a.norm_k, a.norm_q, a.norm_k, at, ax);
  // Per token: h += gate * proj_out([attention | gelu_tanh(proj_mlp(n))]).
  auto finish = [&](std::vector<float>& h, const std::vector<float>& n,
                    const std::vector<float>& attn, int64_t rows) {
    if (rows == 0) return;
    std::vector<float> mlp = apply(w.proj_mlp, n, rows);
    const TensorView m(mlp.data(), DType::kF32, Device::cpu(), {rows, 4 * c_});
    gelu_tanh(m, m, Stream::cpu());
    std::vector<float> joined(size_t(rows * 5 * c_));
    for (int64_t t = 0; t < rows; ++t) {
      std::copy_n(attn.data() + t * c_, c_, joined.data() + t * 5 * c_);
      std::copy_n(mlp.data() + t * 4 * c_, 4 * c_, joined.data() + t * 5 * c_ + c_);
    }
    add_gated(h, apply(w.proj_out, joined, rows), gate, c_);
  };
  finish(x, nx, ax, rows_);
  finish(c, nc, at, j);
}

std::vector<float> FluxDit::forward(const std::vector<float>& image,
                                    const std::vector<float>& text,
                                    const FluxConditioning& cond) const {
  const int64_t j = shape_.text_tokens;
  TESSERA_CHECK_ARG(int64_t(image.size()) == rows_ * config_.in_channels, "image: ",
                    image.size(), " values, expected this rank's ", rows_, " rows x in_channels ",
                    config_.in_channels);
  TESSERA_CHECK_ARG(int64_t(text.size()) == j * config_.joint_attention_dim, "text: ",
                    text.size(), " values, expected ", j, " tokens x joint_attention_dim ",
                    config_.joint_attention_dim);
  TESSERA_CHECK_ARG(int64_t(cond.pooled.size()) == config_.pooled_projection_dim,
                    "conditioning.pooled: ", cond.pooled.size(),
                    " values, expected pooled_projection_dim = ", config_.pooled_projection_dim);
  std::vector<float> x = apply(w_.x_embedder, image, rows_);
  std::vector<float> c = apply(w_.context_embedder, text, j);
  // temb = timestep [+ guidance] + pooled text, each through its two-layer SiLU MLP.
  std::vector<float> temb = apply(w_.time_2, silu(apply(w_.time_1, dit::timestep_sinusoid(cond.timestep), 1)), 1);
  if (config_.guidance_embeds) {
    const std::vector<float> g =
        apply(w_.guidance_2, silu(apply(w_.guidance_1, dit::timestep_sinusoid(cond.guidance), 1)), 1);
    for (size_t i = 0; i < temb.size(); ++i) temb[i] += g[i];
  }
  const std::vector<float> pooled = apply(w_.text_2, silu(apply(w_.text_1, cond.pooled, 1)), 1);
  for (size_t i = 0; i < temb.size(); ++i) temb[i] += pooled[i];
  const std::vector<float> conditioning = silu(temb);  // what every adaLN linear reads
  for (const FluxDoubleBlockWeights& b : w_.double_blocks) double_block(b, conditioning, x, c);
  for (const FluxSingleBlockWeights& b : w_.single_blocks) single_block(b, conditioning, x, c);
  const std::vector<float> e = apply(w_.norm_out, conditioning, 1);  // [scale, shift]
  return apply(w_.proj_out, modulated_norm(x, rows_, c_, e.data() + c_, e.data()), rows_);
}

}  // namespace tessera::model
