// FluxTransformer: Flux.1's transformer (flux_dit.h's computation) on device tensors: bf16 or
// f16 on the cuda backend (f32 accumulation in every GEMM and norm), or f32 on the cpu backend,
// where the tests hold it against FluxDit, the float32 reference. Sequence parallel through
// sp::SpAttention as FluxDit: every rank holds a share of the image tokens and all text tokens.
//
// One buffer holds a step's hidden states, the J text rows first, then this rank's image rows,
// so the single-stream blocks run each linear once over both, and the double-stream blocks run
// theirs on the two row ranges with their own weights. Per block:
//   n = layer_norm(h) then adaln_modulate       ops.h
//   qkv = n [Wq; Wk; Wv]^T + b                  one gemm::Gemm
//   q, k = head_rms_norm_rotary(q, k) in place  RMSNorm per head, RoPE on the image rows
//   attention through SpAttention on strided views of qkv (text rows as its joint tokens)
//   h = gated_add(h, attn Wo^T + b, gate); the feed-forward alike (gelu_tanh between)
// The single-stream block's proj_out over [attention | mlp] runs as two GEMMs (its first C
// input columns, then the other 4C), each added through gated_add: no concatenated copy.
// Every block's adaLN linear reads the same conditioning silu(temb), so all of them (and
// norm_out's) run as one GEMM at the start of the step, over their weights stacked at load.
//
// forward() enqueues the step on a stream. The first forward plans its GEMMs (it allocates);
// later ones neither allocate nor synchronize except for the conditioning's upload (a few
// hundred values, from pageable host memory).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/gemm/gemm.h"
#include "tessera/model/flux_dit.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::model {

class FluxTransformer {
 public:
  // Collective over ctx's ranks (plans the attention for `shape` with sp_options' method).
  // dtype: bf16 or f16 on cuda, f32 on cpu. Weights are asked from `source` one tensor at a
  // time (on worker threads), rounded to dtype and uploaded. Throws kInvalidArgument naming the
  // config field, shape value or dtype that does not fit.
  FluxTransformer(const FluxConfig& config, const FluxTensorSource& source, RankContext& ctx,
                  const FluxDitShape& shape, DType dtype,
                  const sp::PlanOptions& sp_options = {});
  ~FluxTransformer();
  FluxTransformer(const FluxTransformer&) = delete;
  FluxTransformer& operator=(const FluxTransformer&) = delete;

  // Collective: plans the attention again with other options (another method), keeping the
  // weights. local_image_tokens() may change with the method's token layout.
  void replan_attention(const sp::PlanOptions& options);

  // This rank's image tokens (0-based indices into the L image tokens) in local row order.
  const std::vector<int64_t>& local_image_tokens() const { return local_tokens_; }
  const sp::Plan& attention_plan() const { return attention_->plan(); }
  DType dtype() const { return dtype_; }
  int64_t output_columns() const;  // patch^2 * out_channels
  int64_t weight_bytes() const { return weight_bytes_; }

  // Collective. image [local rows, in_channels], text [J, joint_attention_dim], out [local rows,
  // output_columns()]: contiguous, of dtype(), on ctx's device. Enqueued on `stream`.
  void forward(const TensorView& image, const TensorView& text,
               const FluxConditioning& conditioning, const TensorView& out,
               const Stream& stream);

 private:
  struct Linear {
    Tensor weight, bias;  // [out, in], [out] or empty
  };
  struct DoubleBlock {
    Linear qkv[2], out[2], up[2], down[2];  // [0]: image rows, [1]: text rows (the add_/ff_context)
    Tensor norm_q[2], norm_k[2];            // norm_q/k, norm_added_q/k
    int64_t modulation = 0;  // first column of its 12 C modulation values (image 6 C, text 6 C)
  };
  struct SingleBlock {
    Linear qkv, mlp, out_attention, out_mlp;  // out_mlp has no bias (out_attention has proj_out's)
    Tensor norm_q, norm_k;
    int64_t modulation = 0;  // 3 C values: shift, scale, gate
  };
  class Loader;

  // out = a w^T + b over a's rows (no-op for 0 rows), through a Gemm planned per shape.
  void linear(const TensorView& a, const Linear& l, const TensorView& out, const Stream& s);
  // out = layer_norm(x) * (1 + scale) + shift, shift and scale C columns of the modulation.
  void norm_modulate(const TensorView& x, int64_t shift, int64_t scale, const TensorView& out,
                     const Stream& s);
  void add_gated(const TensorView& h, const TensorView& y, int64_t gate, const Stream& s);
  // q and k of qkv rows [first, first + n): normed per head and, for image rows, rotated.
  void norm_rotate(int64_t first, int64_t n, const Tensor& norm_q, const Tensor& norm_k,
                   const Stream& s);
  void attend(const Stream& s);
  void double_block(const DoubleBlock& b, const Stream& s);
  void single_block(const SingleBlock& b, const Stream& s);
  void conditioning(const FluxConditioning& c, const Stream& s);
  TensorView rows(const Tensor& t, int64_t first, int64_t n) const;

  FluxConfig config_;
  FluxDitShape shape_;
  RankContext* ctx_ = nullptr;
  DType dtype_;
  Device device_;
  int64_t c_ = 0, heads_ = 0, d_ = 0, text_ = 0, image_ = 0, weight_bytes_ = 0;
  std::unique_ptr<sp::SpAttention> attention_;
  std::vector<int64_t> local_tokens_;

  Linear x_embedder_, context_embedder_, proj_out_;
  Linear embed_1_[3];  // timestep, guidance, pooled text: their first linears
  Linear embed_2_;     // their second linears side by side [C, k C], biases summed
  Linear modulation_;  // every adaLN linear stacked [modulation columns, C]
  int64_t norm_out_ = 0;  // first modulation column of norm_out's (scale, shift)
  std::vector<DoubleBlock> double_;
  std::vector<SingleBlock> single_;

  Tensor cos_, sin_;                   // f32 [image rows, D]
  Tensor embed_in_, embed_hidden_;     // [1, 256 + 256 + pooled], [1, k C]
  Tensor temb_, cond_, mod_;           // [1, C], [1, C], [1, modulation columns]
  Tensor hidden_, normed_, qkv_, attn_, mlp_, tmp_;  // [J + image rows, C | 3C | C | 4C | C]
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::unique_ptr<gemm::Gemm>>
      gemms_;  // model/dit_device.h's GemmPlans
};

}  // namespace tessera::model
