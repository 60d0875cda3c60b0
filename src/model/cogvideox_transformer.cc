// CogVideoXTransformer (cogvideox_transformer.h): weights uploaded once, a step as GEMMs, layer
// ops and SpAttention on one buffer of the text and video rows.
#include "tessera/model/cogvideox_transformer.h"

#include <cstddef>
#include <string>

#include "model/dit_device.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"
#include "tessera/runtime/memory.h"

namespace tessera::model {
namespace {

constexpr float kQkEps = 1e-6f;  // diffusers' norm_q / norm_k

}  // namespace

CogVideoXTransformer::CogVideoXTransformer(const CogVideoXConfig& config, const BlockSource& blocks,
                                           RankContext& ctx, int64_t video_tokens,
                                           int64_t text_tokens, DType dtype,
                                           const sp::PlanOptions& sp_options)
    : config_(config), ctx_(&ctx), dtype_(dtype), device_(ctx.device) {
  const bool cuda = ctx.backend == Backend::kCuda;
  TESSERA_CHECK_ARG(cuda ? (dtype == DType::kBF16 || dtype == DType::kF16) : dtype == DType::kF32,
                    "dtype = ", dtype_name(dtype), ": expected ",
                    cuda ? "bf16 or f16 on the cuda backend" : "f32 on the cpu backend");
  TESSERA_CHECK(!config.use_rotary_positional_embeddings, ErrorCode::kUnsupported,
                "CogVideoX config: use_rotary_positional_embeddings: its 3-D RoPE tables are not "
                "built yet; expected a configuration without them (CogVideoX-2B's)");
  TESSERA_CHECK_ARG(config.num_attention_heads >= 1 && config.attention_head_dim >= 1 &&
                        config.time_embed_dim >= 1 && config.num_layers >= 0,
                    "CogVideoX config: num_attention_heads = ", config.num_attention_heads,
                    ", attention_head_dim = ", config.attention_head_dim,
                    ", time_embed_dim = ", config.time_embed_dim,
                    ", num_layers = ", config.num_layers,
                    ": expected the first three >= 1 and num_layers >= 0");
  TESSERA_CHECK_ARG(video_tokens >= 1 && text_tokens >= 0, "video_tokens = ", video_tokens,
                    ", text_tokens = ", text_tokens, ": expected >= 1 and >= 0");
  if (!cuda) device_ = Device::cpu();
  c_ = config.inner_dim();
  heads_ = config.num_attention_heads;
  d_ = config.attention_head_dim;
  video_tokens_ = video_tokens;
  text_ = text_tokens;
  const int64_t c = c_, t = config.time_embed_dim, n = config.num_layers;

  const Stream& stream = ctx.stream;
  auto tensor = [&](std::initializer_list<int64_t> shape) {
    Tensor out = Tensor::empty(shape, dtype_, device_);
    weight_bytes_ += int64_t(out.view().span_bytes());
    return out;
  };
  // Rounds `values` to the dtype into t at an element offset (synchronized: the host bytes go).
  auto upload = [&](const Tensor& dst, int64_t offset, const std::vector<float>& values) {
    TESSERA_CHECK(offset + int64_t(values.size()) <= dst.view().numel(), ErrorCode::kInternal,
                  "CogVideoXTransformer: ", values.size(), " values at offset ", offset,
                  " overrun ", dst.view().to_string());
    std::vector<std::byte> bytes(values.size() * dtype_size(dtype_));
    for (size_t i = 0; i < values.size(); ++i)
      store_from_float(bytes.data(), dtype_, int64_t(i), values[i]);
    copy_bytes(static_cast<std::byte*>(dst.data()) + size_t(offset) * dtype_size(dtype_),
               bytes.data(), bytes.size(), stream);
    stream.synchronize();
  };
  auto linear_of = [&](const LinearWeights& w, int64_t out, int64_t in) {
    Linear l{tensor({out, in}), w.bias.empty() ? Tensor() : tensor({out})};
    upload(l.weight, 0, w.weight);
    if (!w.bias.empty()) upload(l.bias, 0, w.bias);
    return l;
  };
  auto vector_of = [&](const std::vector<float>& v, int64_t size) {
    if (v.empty()) return Tensor();
    Tensor out = tensor({size});
    upload(out, 0, v);
    return out;
  };
  modulation_ = {tensor({12 * c * std::max<int64_t>(n, 1), t}),
                 tensor({12 * c * std::max<int64_t>(n, 1)})};
  blocks_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const CogVideoXBlockWeights w = blocks(i);
    Block& b = blocks_[size_t(i)];
    b.modulation = 12 * c * i;
    upload(modulation_.weight, b.modulation * t, w.norm1.weight);
    upload(modulation_.weight, (b.modulation + 6 * c) * t, w.norm2.weight);
    upload(modulation_.bias, b.modulation, w.norm1.bias);
    upload(modulation_.bias, b.modulation + 6 * c, w.norm2.bias);
    b.q = linear_of(w.q, c, c);
    b.k = linear_of(w.k, c, c);
    b.v = linear_of(w.v, c, c);
    b.out = linear_of(w.out, c, c);
    b.up = linear_of(w.ff_up, 4 * c, c);
    b.down = linear_of(w.ff_down, c, 4 * c);
    b.norm1_weight = vector_of(w.norm1_weight, c);
    b.norm1_bias = vector_of(w.norm1_bias, c);
    b.norm2_weight = vector_of(w.norm2_weight, c);
    b.norm2_bias = vector_of(w.norm2_bias, c);
    b.norm_q_weight = vector_of(w.norm_q_weight, d_);
    b.norm_q_bias = vector_of(w.norm_q_bias, d_);
    b.norm_k_weight = vector_of(w.norm_k_weight, d_);
    b.norm_k_bias = vector_of(w.norm_k_bias, d_);
  }
  temb_ = Tensor::empty({1, t}, dtype_, device_);
  cond_ = Tensor::empty({1, t}, dtype_, device_);
  mod_ = Tensor::empty({1, modulation_.weight.view().size(0)}, dtype_, device_);
  replan_attention(sp_options);
}

CogVideoXTransformer::~CogVideoXTransformer() = default;

void CogVideoXTransformer::replan_attention(const sp::PlanOptions& options) {
  local_tokens_ =
      replan_joint_attention(attention_, *ctx_, video_tokens_, text_, heads_, d_, dtype_, options);
  video_ = int64_t(local_tokens_.size());
  const int64_t rows = text_ + video_;
  for (Tensor* b : {&hidden_, &normed_, &q_, &k_, &v_, &attn_, &tmp_})
    *b = Tensor::empty({rows, c_}, dtype_, device_);
  mlp_ = Tensor::empty({rows, 4 * c_}, dtype_, device_);
}

TensorView CogVideoXTransformer::rows(const Tensor& t, int64_t first, int64_t n) const {
  return t.view().slice(0, first, n);
}

void CogVideoXTransformer::linear(const TensorView& a, const Linear& l, const TensorView& out,
                                  const Stream& s) {
  planned_linear(gemms_, a, l.weight, l.bias, out, dtype_, device_, s);
}

void CogVideoXTransformer::norm_modulate(const Tensor& weight, const Tensor& bias,
                                         int64_t modulation, const Stream& s) {
  layer_norm(hidden_.view(), {}, weight.view(), bias.view(), float(config_.norm_eps),
             normed_.view(), s);
  // Video rows: (shift, scale) at columns 0 and C; text rows: (enc_shift, enc_scale) at 3C, 4C.
  const int64_t first[2] = {text_, 0}, count[2] = {video_, text_}, column[2] = {0, 3 * c_};
  for (int i = 0; i < 2; ++i) {
    if (count[i] == 0) continue;
    const TensorView o = rows(normed_, first[i], count[i]);
    const TensorView tokens(o.data(), dtype_, device_, {1, count[i], c_});
    adaln_modulate(tokens, row_span(mod_, modulation + column[i], c_),
                   row_span(mod_, modulation + column[i] + c_, c_), tokens, s);
  }
}

void CogVideoXTransformer::add_gated(const TensorView& y, int64_t gate, const Stream& s) {
  const int64_t first[2] = {text_, 0}, count[2] = {video_, text_}, column[2] = {0, 3 * c_};
  for (int i = 0; i < 2; ++i) {
    if (count[i] == 0) continue;
    auto tokens = [&](const TensorView& t) {
      return TensorView(t.slice(0, first[i], count[i]).data(), dtype_, device_, {1, count[i], c_});
    };
    gated_add(tokens(hidden_.view()), tokens(y), row_span(mod_, gate + column[i], c_),
              tokens(hidden_.view()), s);
  }
}

void CogVideoXTransformer::attend(const Stream& s) {
  auto part = [&](const Tensor& t, int64_t row, int64_t count) {
    return TensorView(t.view().slice(0, row, count).data(), dtype_, device_,
                      {1, count, heads_, d_});
  };
  sp::SpAttentionTensors t;
  t.q = part(q_, text_, video_);
  t.k = part(k_, text_, video_);
  t.v = part(v_, text_, video_);
  t.o = part(attn_, text_, video_);
  if (text_ > 0) {
    t.joint_q = part(q_, 0, text_);
    t.joint_k = part(k_, 0, text_);
    t.joint_v = part(v_, 0, text_);
    t.joint_o = part(attn_, 0, text_);
  }
  attention_->run(t, s);
}

void CogVideoXTransformer::block(const Block& b, const Stream& s) {
  const int64_t m = b.modulation, rows_all = text_ + video_;
  norm_modulate(b.norm1_weight, b.norm1_bias, m, s);
  linear(normed_.view(), b.q, q_.view(), s);
  linear(normed_.view(), b.k, k_.view(), s);
  linear(normed_.view(), b.v, v_.view(), s);
  // q and k layer-normed per head: [rows x heads, D] views of the contiguous buffers.
  for (auto [t, w, bias] : {std::tuple{&q_, &b.norm_q_weight, &b.norm_q_bias},
                            std::tuple{&k_, &b.norm_k_weight, &b.norm_k_bias}}) {
    const TensorView heads(t->data(), dtype_, device_, {rows_all * heads_, d_});
    layer_norm(heads, {}, w->view(), bias->view(), kQkEps, heads, s);
  }
  attend(s);
  linear(attn_.view(), b.out, tmp_.view(), s);
  add_gated(tmp_.view(), m + 2 * c_, s);
  norm_modulate(b.norm2_weight, b.norm2_bias, m + 6 * c_, s);
  linear(normed_.view(), b.up, mlp_.view(), s);
  gelu_tanh(mlp_.view(), mlp_.view(), s);
  linear(mlp_.view(), b.down, tmp_.view(), s);
  add_gated(tmp_.view(), m + 8 * c_, s);
}

void CogVideoXTransformer::forward(const TensorView& video, const TensorView& text,
                                   const std::vector<float>& temb, const Stream& s) {
  auto check = [&](const TensorView& t, int64_t r, const char* what) {
    TESSERA_CHECK_ARG(t.ndim() == 2 && t.size(0) == r && t.size(1) == c_ && t.is_contiguous() &&
                          t.dtype() == dtype_ && t.device() == device_,
                      what, " = ", t.to_string(), ": expected contiguous ", dtype_name(dtype_), "[",
                      r, ", ", c_, "] on ", device_.to_string());
  };
  check(video, video_, "video");
  if (text_ > 0) check(text, text_, "text");
  TESSERA_CHECK_ARG(int64_t(temb.size()) == config_.time_embed_dim, "temb: ", temb.size(),
                    " values, expected time_embed_dim = ", config_.time_embed_dim);
  std::vector<std::byte> bytes(temb.size() * dtype_size(dtype_));
  for (size_t i = 0; i < temb.size(); ++i)
    store_from_float(bytes.data(), dtype_, int64_t(i), temb[i]);
  copy_bytes(temb_.data(), bytes.data(), bytes.size(), s);
  silu(temb_.view(), cond_.view(), s);
  if (!blocks_.empty()) linear(cond_.view(), modulation_, mod_.view(), s);
  const size_t e = dtype_size(dtype_);
  if (text_ > 0) copy_bytes(hidden_.data(), text.data(), size_t(text_ * c_) * e, s);
  copy_bytes(rows(hidden_, text_, video_).data(), video.data(), size_t(video_ * c_) * e, s);
  for (const Block& b : blocks_) block(b, s);
  if (text_ > 0) copy_bytes(text.data(), hidden_.data(), size_t(text_ * c_) * e, s);
  copy_bytes(video.data(), rows(hidden_, text_, video_).data(), size_t(video_ * c_) * e, s);
}

}  // namespace tessera::model
