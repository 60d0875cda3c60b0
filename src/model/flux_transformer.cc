// FluxTransformer (flux_transformer.h): weights uploaded once, a step as GEMMs, layer ops and
// SpAttention on one buffer of the text and image rows.
#include "tessera/model/flux_transformer.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "model/dit_ops.h"
#include "model/dit_device.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"
#include "tessera/runtime/memory.h"

namespace tessera::model {
namespace {

constexpr float kEps = 1e-6f;
constexpr int64_t kSinusoid = 256;  // the timestep embedding's width (dit::timestep_sinusoid)

std::vector<std::byte> to_dtype(const std::vector<float>& v, DType dtype) {
  std::vector<std::byte> out(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) store_from_float(out.data(), dtype, int64_t(i), v[i]);
  return out;
}


// Host values bound for a device tensor at an element offset.
struct Piece {
  const Tensor* dst = nullptr;
  int64_t offset = 0;
  std::vector<float> values;
};
using Job = std::function<std::vector<Piece>()>;

}  // namespace

// Allocates the device weights, then fills them from the source: jobs (a block's tensors, or
// the embedders') run on worker threads a group at a time and are uploaded in order.
class FluxTransformer::Loader {
 public:
  Loader(FluxTransformer& m, const FluxTensorSource& source, const Stream& stream)
      : m_(m), source_(source), stream_(stream) {}

  Linear linear(int64_t out, int64_t in, bool bias = true) {
    return {tensor({out, in}), bias ? tensor({out}) : Tensor()};
  }
  Tensor tensor(std::initializer_list<int64_t> shape) {
    Tensor t = Tensor::empty(shape, m_.dtype_, m_.device_);
    m_.weight_bytes_ += int64_t(t.view().span_bytes());
    return t;
  }
  std::vector<float> get(const std::string& name, int64_t rows, int64_t cols) const {
    return source_(name, rows, cols);
  }
  void add(Job job) { jobs_.push_back(std::move(job)); }

  void run() {
    const size_t workers = std::max(1u, std::thread::hardware_concurrency());
    for (size_t first = 0; first < jobs_.size(); first += workers) {
      // Each worker draws (or reads) its job's values and rounds them to the dtype.
      using Bytes = std::vector<std::pair<void*, std::vector<std::byte>>>;
      std::vector<std::future<Bytes>> group;
      for (size_t j = first; j < std::min(jobs_.size(), first + workers); ++j) {
        group.push_back(std::async(std::launch::async, [this, j] {
          Bytes out;
          for (const Piece& p : jobs_[j]()) {
            TESSERA_CHECK(p.offset + int64_t(p.values.size()) <= p.dst->view().numel(),
                          ErrorCode::kInternal, "FluxTransformer: ", p.values.size(),
                          " values at offset ", p.offset, " overrun ", p.dst->view().to_string());
            auto* dst = static_cast<std::byte*>(p.dst->data()) +
                        size_t(p.offset) * dtype_size(m_.dtype_);
            out.emplace_back(dst, to_dtype(p.values, m_.dtype_));
          }
          return out;
        }));
      }
      for (auto& future : group) {
        for (const auto& [dst, bytes] : future.get()) copy_bytes(dst, bytes.data(), bytes.size(), stream_);
        stream_.synchronize();  // before the host bytes go out of scope
      }
    }
  }

 private:
  FluxTransformer& m_;
  const FluxTensorSource& source_;
  Stream stream_;
  std::vector<Job> jobs_;
};

namespace {

// [rows, cols] matrices side by side: row r is a's row r, then b's, ...
std::vector<float> side_by_side(const std::vector<std::vector<float>>& parts, int64_t rows) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r)
    for (const std::vector<float>& p : parts) {
      const int64_t cols = int64_t(p.size()) / rows;
      out.insert(out.end(), p.begin() + r * cols, p.begin() + (r + 1) * cols);
    }
  return out;
}

std::vector<float> concat(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> out;
  for (const std::vector<float>& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

FluxTransformer::FluxTransformer(const FluxConfig& config, const FluxTensorSource& source,
                                 RankContext& ctx, const FluxDitShape& shape, DType dtype,
                                 const sp::PlanOptions& sp_options)
    : config_(config), shape_(shape), dtype_(dtype), device_(ctx.device) {
  dit::check_flux(config, shape);
  flux_tensor_names(config);  // checks the config's sizes (kInvalidArgument naming them)
  const bool cuda = ctx.backend == Backend::kCuda;
  TESSERA_CHECK_ARG(cuda ? (dtype == DType::kBF16 || dtype == DType::kF16) : dtype == DType::kF32,
                    "dtype = ", dtype_name(dtype), ": expected ",
                    cuda ? "bf16 or f16 on the cuda backend" : "f32 on the cpu backend");
  if (!cuda) device_ = Device::cpu();
  c_ = config.inner_dim();
  heads_ = config.num_attention_heads;
  d_ = config.attention_head_dim;
  text_ = shape.text_tokens;

  ctx_ = &ctx;
  // Weights: shapes first, then the values from the source on worker threads.
  const Stream& stream = ctx.stream;
  Loader load(*this, source, stream);
  const int64_t c = c_, d = d_;
  const int64_t out_channels = config.out_channels > 0 ? config.out_channels : config.in_channels;
  const int64_t parts = config.guidance_embeds ? 3 : 2;
  const int64_t columns =
      12 * c * config.num_layers + 3 * c * config.num_single_layers + 2 * c;
  x_embedder_ = load.linear(c, config.in_channels);
  context_embedder_ = load.linear(c, config.joint_attention_dim);
  proj_out_ = load.linear(config.patch_size * config.patch_size * out_channels, c);
  embed_1_[0] = load.linear(c, kSinusoid);
  if (config.guidance_embeds) embed_1_[1] = load.linear(c, kSinusoid);
  embed_1_[2] = load.linear(c, config.pooled_projection_dim);
  embed_2_ = load.linear(c, parts * c);
  modulation_ = load.linear(columns, c);
  norm_out_ = columns - 2 * c;

  auto fill = [&load](const Linear& l, const std::string& name, int64_t out, int64_t in,
                      std::vector<Piece>& pieces, int64_t row = 0) {
    pieces.push_back({&l.weight, row * in, load.get(name + ".weight", out, in)});
    pieces.push_back({&l.bias, row, load.get(name + ".bias", out, 1)});
  };
  // Rows [q; k; v] of one qkv linear from three [C, C] linears.
  auto fill_qkv = [&load, c](const Linear& l, const std::string& p, const char* q, const char* k,
                             const char* v, std::vector<Piece>& pieces) {
    pieces.push_back({&l.weight, 0,
                      concat({load.get(p + q + ".weight", c, c), load.get(p + k + ".weight", c, c),
                              load.get(p + v + ".weight", c, c)})});
    pieces.push_back({&l.bias, 0,
                      concat({load.get(p + q + ".bias", c, 1), load.get(p + k + ".bias", c, 1),
                              load.get(p + v + ".bias", c, 1)})});
  };
  auto fill_vector = [&load, d](const Tensor& t, const std::string& name,
                                std::vector<Piece>& pieces) {
    pieces.push_back({&t, 0, load.get(name, d, 1)});
  };

  load.add([&, c]() {
    std::vector<Piece> p;
    fill(x_embedder_, "x_embedder", c, config.in_channels, p);
    fill(context_embedder_, "context_embedder", c, config.joint_attention_dim, p);
    fill(proj_out_, "proj_out", proj_out_.weight.view().size(0), c, p);
    const std::string t = "time_text_embed.";
    fill(embed_1_[0], t + "timestep_embedder.linear_1", c, kSinusoid, p);
    if (config.guidance_embeds) fill(embed_1_[1], t + "guidance_embedder.linear_1", c, kSinusoid, p);
    fill(embed_1_[2], t + "text_embedder.linear_1", c, config.pooled_projection_dim, p);
    std::vector<std::string> second = {t + "timestep_embedder.linear_2"};
    if (config.guidance_embeds) second.push_back(t + "guidance_embedder.linear_2");
    second.push_back(t + "text_embedder.linear_2");
    std::vector<std::vector<float>> weights;
    std::vector<float> bias(size_t(c), 0.0f);
    for (const std::string& name : second) {
      weights.push_back(load.get(name + ".weight", c, c));
      const std::vector<float> b = load.get(name + ".bias", c, 1);
      for (int64_t i = 0; i < c; ++i) bias[size_t(i)] += b[size_t(i)];
    }
    p.push_back({&embed_2_.weight, 0, side_by_side(weights, c)});
    p.push_back({&embed_2_.bias, 0, bias});
    fill(modulation_, "norm_out.linear", 2 * c, c, p, norm_out_);
    return p;
  });

  double_.resize(size_t(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i) {
    DoubleBlock& b = double_[size_t(i)];
    for (int s = 0; s < 2; ++s) {
      b.qkv[s] = load.linear(3 * c, c);
      b.out[s] = load.linear(c, c);
      b.up[s] = load.linear(4 * c, c);
      b.down[s] = load.linear(c, 4 * c);
      b.norm_q[s] = load.tensor({d});
      b.norm_k[s] = load.tensor({d});
    }
    b.modulation = 12 * c * i;
    load.add([&, i, c]() {
      const DoubleBlock& blk = double_[size_t(i)];
      const std::string p = "transformer_blocks." + std::to_string(i) + ".";
      std::vector<Piece> pieces;
      fill(modulation_, p + "norm1.linear", 6 * c, c, pieces, blk.modulation);
      fill(modulation_, p + "norm1_context.linear", 6 * c, c, pieces, blk.modulation + 6 * c);
      fill_qkv(blk.qkv[0], p + "attn.", "to_q", "to_k", "to_v", pieces);
      fill_qkv(blk.qkv[1], p + "attn.", "add_q_proj", "add_k_proj", "add_v_proj", pieces);
      fill(blk.out[0], p + "attn.to_out.0", c, c, pieces);
      fill(blk.out[1], p + "attn.to_add_out", c, c, pieces);
      fill(blk.up[0], p + "ff.net.0.proj", 4 * c, c, pieces);
      fill(blk.down[0], p + "ff.net.2", c, 4 * c, pieces);
      fill(blk.up[1], p + "ff_context.net.0.proj", 4 * c, c, pieces);
      fill(blk.down[1], p + "ff_context.net.2", c, 4 * c, pieces);
      fill_vector(blk.norm_q[0], p + "attn.norm_q.weight", pieces);
      fill_vector(blk.norm_k[0], p + "attn.norm_k.weight", pieces);
      fill_vector(blk.norm_q[1], p + "attn.norm_added_q.weight", pieces);
      fill_vector(blk.norm_k[1], p + "attn.norm_added_k.weight", pieces);
      return pieces;
    });
  }
  single_.resize(size_t(config.num_single_layers));
  for (int64_t i = 0; i < config.num_single_layers; ++i) {
    SingleBlock& b = single_[size_t(i)];
    b.qkv = load.linear(3 * c, c);
    b.mlp = load.linear(4 * c, c);
    b.out_attention = load.linear(c, c);
    b.out_mlp = load.linear(c, 4 * c, false);
    b.norm_q = load.tensor({d});
    b.norm_k = load.tensor({d});
    b.modulation = 12 * c * config.num_layers + 3 * c * i;
    load.add([&, i, c]() {
      const SingleBlock& blk = single_[size_t(i)];
      const std::string p = "single_transformer_blocks." + std::to_string(i) + ".";
      std::vector<Piece> pieces;
      fill(modulation_, p + "norm.linear", 3 * c, c, pieces, blk.modulation);
      fill_qkv(blk.qkv, p + "attn.", "to_q", "to_k", "to_v", pieces);
      fill(blk.mlp, p + "proj_mlp", 4 * c, c, pieces);
      // proj_out [C, 5C]: its first C input columns read the attention, the other 4C the MLP.
      const std::vector<float> w = load.get(p + "proj_out.weight", c, 5 * c);
      std::vector<float> wa, wm;
      for (int64_t r = 0; r < c; ++r) {
        wa.insert(wa.end(), w.begin() + r * 5 * c, w.begin() + r * 5 * c + c);
        wm.insert(wm.end(), w.begin() + r * 5 * c + c, w.begin() + (r + 1) * 5 * c);
      }
      pieces.push_back({&blk.out_attention.weight, 0, std::move(wa)});
      pieces.push_back({&blk.out_attention.bias, 0, load.get(p + "proj_out.bias", c, 1)});
      pieces.push_back({&blk.out_mlp.weight, 0, std::move(wm)});
      fill_vector(blk.norm_q, p + "attn.norm_q.weight", pieces);
      fill_vector(blk.norm_k, p + "attn.norm_k.weight", pieces);
      return pieces;
    });
  }
  load.run();
  embed_in_ = Tensor::empty({1, 2 * kSinusoid + config.pooled_projection_dim}, dtype, device_);
  embed_hidden_ = Tensor::empty({1, parts * c}, dtype, device_);
  temb_ = Tensor::empty({1, c}, dtype, device_);
  cond_ = Tensor::empty({1, c}, dtype, device_);
  mod_ = Tensor::empty({1, columns}, dtype, device_);
  replan_attention(sp_options);
}

void FluxTransformer::replan_attention(const sp::PlanOptions& options) {
  local_tokens_ = replan_joint_attention(attention_, *ctx_, shape_.image_tokens, text_, heads_, d_,
                                         dtype_, options);
  image_ = int64_t(local_tokens_.size());

  // RoPE tables of this rank's image rows, and the step's activations.
  std::vector<float> cos_host, sin_host;
  dit::flux_rope_tables(local_tokens_, shape_.grid_width, config_.axes_dims_rope, cos_host,
                        sin_host);
  cos_ = Tensor::empty({image_, d_}, DType::kF32, device_);
  sin_ = Tensor::empty({image_, d_}, DType::kF32, device_);
  copy_bytes(cos_.data(), cos_host.data(), cos_host.size() * sizeof(float), ctx_->stream);
  copy_bytes(sin_.data(), sin_host.data(), sin_host.size() * sizeof(float), ctx_->stream);
  const int64_t rows = text_ + image_;
  hidden_ = Tensor::empty({rows, c_}, dtype_, device_);
  normed_ = Tensor::empty({rows, c_}, dtype_, device_);
  qkv_ = Tensor::empty({rows, 3 * c_}, dtype_, device_);
  attn_ = Tensor::empty({rows, c_}, dtype_, device_);
  mlp_ = Tensor::empty({rows, 4 * c_}, dtype_, device_);
  tmp_ = Tensor::empty({rows, c_}, dtype_, device_);
  ctx_->stream.synchronize();
}

FluxTransformer::~FluxTransformer() = default;

int64_t FluxTransformer::output_columns() const {
  return proj_out_.weight.view().size(0);
}

TensorView FluxTransformer::rows(const Tensor& t, int64_t first, int64_t n) const {
  return t.view().slice(0, first, n);
}

void FluxTransformer::linear(const TensorView& a, const Linear& l, const TensorView& out,
                             const Stream& s) {
  planned_linear(gemms_, a, l.weight, l.bias, out, dtype_, device_, s);
}

void FluxTransformer::norm_modulate(const TensorView& x, int64_t shift, int64_t scale,
                                    const TensorView& out, const Stream& s) {
  if (x.size(0) == 0) return;
  layer_norm(x, {}, {}, {}, kEps, out, s);
  const TensorView o(out.data(), dtype_, device_, {1, out.size(0), c_},
                     {out.size(0) * out.stride(0), out.stride(0), 1});
  adaln_modulate(o, row_span(mod_, shift, c_), row_span(mod_, scale, c_), o, s);
}

void FluxTransformer::add_gated(const TensorView& h, const TensorView& y, int64_t gate,
                                const Stream& s) {
  if (h.size(0) == 0) return;
  auto tokens = [&](const TensorView& t) {
    return TensorView(t.data(), dtype_, device_, {1, t.size(0), c_},
                      {t.size(0) * t.stride(0), t.stride(0), 1});
  };
  gated_add(tokens(h), tokens(y), row_span(mod_, gate, c_), tokens(h), s);
}

void FluxTransformer::norm_rotate(int64_t first, int64_t n, const Tensor& norm_q,
                                  const Tensor& norm_k, const Stream& s) {
  auto heads = [&](int64_t row, int64_t count, int64_t column) {
    auto* data = static_cast<std::byte*>(qkv_.data()) +
                 size_t(row * 3 * c_ + column) * dtype_size(dtype_);
    return TensorView(data, dtype_, device_, {count, heads_, d_}, {3 * c_, d_, 1});
  };
  // Text rows [first, J) are not rotated (their position ids are 0); image rows are.
  const int64_t text_end = std::min(first + n, text_);
  if (first < text_end) {
    for (auto [column, weight] : {std::pair{int64_t(0), &norm_q}, std::pair{c_, &norm_k}}) {
      const TensorView v = heads(first, text_end - first, column);
      head_rms_norm_rotary(v, *weight, kEps, {}, {}, v, s);
    }
  }
  const int64_t image_first = std::max(first, text_);
  if (image_first < first + n) {
    const int64_t count = first + n - image_first, table_row = image_first - text_;
    for (auto [column, weight] : {std::pair{int64_t(0), &norm_q}, std::pair{c_, &norm_k}}) {
      const TensorView v = heads(image_first, count, column);
      head_rms_norm_rotary(v, *weight, kEps, rows(cos_, table_row, count),
                           rows(sin_, table_row, count), v, s);
    }
  }
}

void FluxTransformer::attend(const Stream& s) {
  auto part = [&](const Tensor& t, int64_t width, int64_t column, int64_t row, int64_t count) {
    auto* data = static_cast<std::byte*>(t.data()) + size_t(row * width + column) * dtype_size(dtype_);
    return TensorView(data, dtype_, device_, {1, count, heads_, d_},
                      {count * width, width, d_, 1});
  };
  const int64_t w = 3 * c_, j = text_, l = image_;
  sp::SpAttentionTensors t;
  t.q = part(qkv_, w, 0, j, l);
  t.k = part(qkv_, w, c_, j, l);
  t.v = part(qkv_, w, 2 * c_, j, l);
  t.o = part(attn_, c_, 0, j, l);
  if (j > 0) {
    t.joint_q = part(qkv_, w, 0, 0, j);
    t.joint_k = part(qkv_, w, c_, 0, j);
    t.joint_v = part(qkv_, w, 2 * c_, 0, j);
    t.joint_o = part(attn_, c_, 0, 0, j);
  }
  attention_->run(t, s);
}

void FluxTransformer::double_block(const DoubleBlock& b, const Stream& s) {
  // [0]: the image rows, [1]: the text rows; each with its 6 C modulation values
  // (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp).
  const int64_t first[2] = {text_, 0}, count[2] = {image_, text_};
  for (int i = 0; i < 2; ++i) {
    const int64_t m = b.modulation + 6 * c_ * i;
    norm_modulate(rows(hidden_, first[i], count[i]), m, m + c_, rows(normed_, first[i], count[i]), s);
    linear(rows(normed_, first[i], count[i]), b.qkv[i], rows(qkv_, first[i], count[i]), s);
    if (count[i] > 0) norm_rotate(first[i], count[i], b.norm_q[i], b.norm_k[i], s);
  }
  attend(s);
  for (int i = 0; i < 2; ++i) {
    const int64_t m = b.modulation + 6 * c_ * i;
    const TensorView h = rows(hidden_, first[i], count[i]), t = rows(tmp_, first[i], count[i]);
    const TensorView n = rows(normed_, first[i], count[i]), f = rows(mlp_, first[i], count[i]);
    linear(rows(attn_, first[i], count[i]), b.out[i], t, s);
    add_gated(h, t, m + 2 * c_, s);
    norm_modulate(h, m + 3 * c_, m + 4 * c_, n, s);
    linear(n, b.up[i], f, s);
    if (count[i] > 0) gelu_tanh(f, f, s);
    linear(f, b.down[i], t, s);
    add_gated(h, t, m + 5 * c_, s);
  }
}

void FluxTransformer::single_block(const SingleBlock& b, const Stream& s) {
  const int64_t m = b.modulation;  // shift, scale, gate
  norm_modulate(hidden_, m, m + c_, normed_, s);
  linear(normed_, b.qkv, qkv_, s);
  norm_rotate(0, text_ + image_, b.norm_q, b.norm_k, s);
  attend(s);
  linear(normed_, b.mlp, mlp_, s);
  gelu_tanh(mlp_, mlp_, s);
  linear(attn_, b.out_attention, tmp_, s);
  add_gated(hidden_, tmp_, m + 2 * c_, s);
  linear(mlp_, b.out_mlp, tmp_, s);
  add_gated(hidden_, tmp_, m + 2 * c_, s);
}

void FluxTransformer::conditioning(const FluxConditioning& cond, const Stream& s) {
  TESSERA_CHECK_ARG(int64_t(cond.pooled.size()) == config_.pooled_projection_dim,
                    "conditioning.pooled: ", cond.pooled.size(),
                    " values, expected pooled_projection_dim = ", config_.pooled_projection_dim);
  // embed_in_: [sinusoid(timestep) | sinusoid(guidance) | pooled]; each first linear writes its
  // C columns of embed_hidden_, which the second linears (side by side) read at once.
  const std::vector<float> in = concat({dit::timestep_sinusoid(cond.timestep),
                                        dit::timestep_sinusoid(cond.guidance), cond.pooled});
  const std::vector<std::byte> bytes = to_dtype(in, dtype_);
  copy_bytes(embed_in_.data(), bytes.data(), bytes.size(), s);
  const int64_t in_first[3] = {0, kSinusoid, 2 * kSinusoid};
  const int64_t in_width[3] = {kSinusoid, kSinusoid, config_.pooled_projection_dim};
  int64_t column = 0;
  for (int i = 0; i < 3; ++i) {
    if (embed_1_[i].weight.view().empty()) continue;  // no guidance embedder
    linear(row_span(embed_in_, in_first[i], in_width[i]), embed_1_[i],
           row_span(embed_hidden_, column, c_), s);
    column += c_;
  }
  silu(embed_hidden_, embed_hidden_, s);
  linear(embed_hidden_, embed_2_, temb_, s);
  silu(temb_, cond_, s);
  linear(cond_, modulation_, mod_, s);
}

void FluxTransformer::forward(const TensorView& image, const TensorView& text,
                              const FluxConditioning& cond, const TensorView& out,
                              const Stream& s) {
  auto check = [&](const TensorView& t, int64_t r, int64_t cols, const char* what) {
    TESSERA_CHECK_ARG(t.ndim() == 2 && t.size(0) == r && t.size(1) == cols && t.is_contiguous() &&
                          t.dtype() == dtype_ && t.device() == device_,
                      what, " = ", t.to_string(), ": expected contiguous ", dtype_name(dtype_), "[",
                      r, ", ", cols, "] on ", device_.to_string());
  };
  check(image, image_, config_.in_channels, "image");
  if (text_ > 0) check(text, text_, config_.joint_attention_dim, "text");
  check(out, image_, output_columns(), "out");
  conditioning(cond, s);
  linear(image, x_embedder_, rows(hidden_, text_, image_), s);
  if (text_ > 0) linear(text, context_embedder_, rows(hidden_, 0, text_), s);
  for (const DoubleBlock& b : double_) double_block(b, s);
  for (const SingleBlock& b : single_) single_block(b, s);
  // norm_out's modulation is (scale, shift).
  norm_modulate(rows(hidden_, text_, image_), norm_out_ + c_, norm_out_,
                rows(normed_, text_, image_), s);
  linear(rows(normed_, text_, image_), proj_out_, out, s);
}

}  // namespace tessera::model
