// CogVideoXTransformer: a stack of CogVideoX's transformer blocks (cogvideox_block.h's
// computation) on device tensors: bf16 or f16 on the cuda backend (f32 accumulation in every
// GEMM and norm), or f32 on the cpu backend, where the tests hold it to CogVideoXBlock, the
// float32 reference. Sequence parallel through sp::SpAttention as CogVideoXBlock: every rank
// holds a share of the video tokens and all text tokens.
//
// One buffer holds a step's hidden states, the J text rows first, then this rank's video rows,
// so each of a block's linears (text and video share them) runs once over both. Per block:
//   n = layer_norm(h) (affine), then adaln_modulate: text and video rows each with their own
//       shift and scale                              ops.h
//   q, k, v = n W^T + b                              three gemm::Gemm into contiguous buffers
//   q, k = layer_norm per head (affine, eps 1e-6)    ops.h over [rows x heads, D] views
//   attention through SpAttention (text rows as its joint tokens)
//   h += gate * (attn Wo^T + b); the feed-forward alike (gelu_tanh between)
// Every block's adaLN linears read the same silu(temb), so all of them run as one GEMM at the
// start of the step over their weights stacked at load. CogVideoX-5B's 3-D RoPE is refused (its
// tables are not built, as for the cpu blocks).
//
// forward() enqueues the step on a stream. The first forward plans its GEMMs (it allocates);
// later ones neither allocate nor synchronize except for temb's upload (time_embed_dim values,
// from pageable host memory).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/gemm/gemm.h"
#include "tessera/model/cogvideox_block.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::model {

class CogVideoXTransformer {
 public:
  // Block `index`'s weights in float32 (random_cogvideox_block or load_cogvideox_block), asked
  // once per block and uploaded rounded to the dtype.
  using BlockSource = std::function<CogVideoXBlockWeights(int64_t index)>;

  // Collective over ctx's ranks (plans the attention for L video and J text tokens with
  // sp_options' method). dtype: bf16 or f16 on cuda, f32 on cpu. Throws kInvalidArgument naming
  // the config field, token count or dtype that does not fit, kUnsupported for RoPE configs.
  CogVideoXTransformer(const CogVideoXConfig& config, const BlockSource& blocks, RankContext& ctx,
                       int64_t video_tokens, int64_t text_tokens, DType dtype,
                       const sp::PlanOptions& sp_options = {});
  ~CogVideoXTransformer();
  CogVideoXTransformer(const CogVideoXTransformer&) = delete;
  CogVideoXTransformer& operator=(const CogVideoXTransformer&) = delete;

  // Collective: plans the attention again with other options (another method), keeping the
  // weights. local_video_tokens() may change with the method's token layout.
  void replan_attention(const sp::PlanOptions& options);

  // This rank's video tokens (0-based indices into the L video tokens) in local row order.
  const std::vector<int64_t>& local_video_tokens() const { return local_tokens_; }
  const sp::Plan& attention_plan() const { return attention_->plan(); }
  DType dtype() const { return dtype_; }
  int64_t weight_bytes() const { return weight_bytes_; }

  // Collective. video [local rows, C] and text [J, C] (C = inner_dim), contiguous, of dtype(), on
  // ctx's device: every block applied, in place. temb: time_embed_dim values. Enqueued on
  // `stream`.
  void forward(const TensorView& video, const TensorView& text, const std::vector<float>& temb,
               const Stream& stream);

 private:
  struct Linear {
    Tensor weight, bias;  // [out, in], [out] or empty
  };
  struct Block {
    Linear q, k, v, out, up, down;
    Tensor norm1_weight, norm1_bias, norm2_weight, norm2_bias;      // [C] or empty (not affine)
    Tensor norm_q_weight, norm_q_bias, norm_k_weight, norm_k_bias;  // [D]
    int64_t modulation = 0;  // first column of its 12 C modulation values (norm1's, then norm2's)
  };

  void linear(const TensorView& a, const Linear& l, const TensorView& out, const Stream& s);
  // h's text and video rows layer-normed (weight, bias) into normed_, then modulated with the
  // (shift, scale, -, enc_shift, enc_scale) columns at `modulation`.
  void norm_modulate(const Tensor& weight, const Tensor& bias, int64_t modulation, const Stream& s);
  // hidden_ += gate * y, the video rows with the gate at `gate`, the text rows with gate + 3 C.
  void add_gated(const TensorView& y, int64_t gate, const Stream& s);
  void attend(const Stream& s);
  void block(const Block& b, const Stream& s);
  TensorView rows(const Tensor& t, int64_t first, int64_t n) const;

  CogVideoXConfig config_;
  RankContext* ctx_ = nullptr;
  DType dtype_;
  Device device_;
  int64_t c_ = 0, heads_ = 0, d_ = 0, video_tokens_ = 0, text_ = 0, video_ = 0;
  int64_t weight_bytes_ = 0;
  std::unique_ptr<sp::SpAttention> attention_;
  std::vector<int64_t> local_tokens_;

  std::vector<Block> blocks_;
  Linear modulation_;  // every block's norm1 and norm2 linears stacked [12 C blocks, time_embed]
  Tensor temb_, cond_, mod_;  // [1, time_embed], [1, time_embed], [1, 12 C blocks]
  Tensor hidden_, normed_, q_, k_, v_, attn_, mlp_, tmp_;  // [J + video rows, C | 4C]
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::unique_ptr<gemm::Gemm>>
      gemms_;  // model/dit_device.h's GemmPlans
};

}  // namespace tessera::model
