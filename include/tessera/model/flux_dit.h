// FluxDit: Flux.1's transformer (diffusers' FluxTransformer2DModel) on the cpu backend, float32,
// with its attention sequence-parallel through sp::SpAttention: every rank holds a share of the
// image tokens (in the plan's token layout) and all of the text tokens, which it computes
// redundantly (the joint tokens of the sequence-parallel plan), as xDiT runs Flux.
//
//   x    = x_embedder(image latents)                c = context_embedder(text)
//   temb = timestep_embedder(sinusoid(1000 t)) [+ guidance_embedder(sinusoid(1000 g))]
//          + text_embedder(pooled text)
//   double-stream block (num_layers):    for image x and text c separately,
//     shift, scale, gate (x6) = linear(silu(temb));  n = layer_norm(x) * (1 + scale) + shift
//     q, k, v = projections of n (to_* for x, add_*_proj for c), rms_norm per head (norm_q/k,
//               norm_added_q/k), RoPE over the 3 position axes (text ids 0, image ids
//               (0, row, col) of the latent grid), joint attention over [c, x]
//     x += gate_msa * to_out.0(attn_x);  x += gate_mlp * ff(modulated layer_norm(x)); c alike
//   single-stream block (num_single_layers), on the tokens [c, x]:
//     shift, scale, gate = linear(silu(temb));  n = layer_norm(h) * (1 + scale) + shift
//     h += gate * proj_out([attention(n) | gelu_tanh(proj_mlp(n))])
//   out  = proj_out(layer_norm(x) * (1 + scale) + shift), (scale, shift) = norm_out(temb)
// Feed-forwards are Linear(C, 4C), gelu(tanh), Linear(4C, C); every linear has a bias; the
// layer norms have no affine (eps 1e-6), the q/k RMSNorms eps 1e-6.
//
// Batch 1. The image tokens are the packed latent patches of an H x W grid (L = H * W, row
// major: token t at (t / W, t % W)); `grid_width` = W.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/model/linear_weights.h"
#include "tessera/model/model_config.h"
#include "tessera/model/weight_store.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::model {

struct FluxAttentionWeights {
  LinearWeights q, k, v;                      // to_q, to_k, to_v
  std::vector<float> norm_q, norm_k;       // [D]
  LinearWeights add_q, add_k, add_v;          // double-stream only: add_{q,k,v}_proj
  std::vector<float> norm_added_q, norm_added_k;
  LinearWeights out, add_out;                 // double-stream only: to_out.0, to_add_out
};

struct FluxDoubleBlockWeights {
  LinearWeights norm1, norm1_context;  // [6C, C]
  FluxAttentionWeights attn;
  LinearWeights ff_up, ff_down;                  // ff.net.0.proj [4C, C], ff.net.2 [C, 4C]
  LinearWeights ff_context_up, ff_context_down;  // ff_context.net.0.proj, ff_context.net.2
};

struct FluxSingleBlockWeights {
  LinearWeights norm;  // [3C, C]
  FluxAttentionWeights attn;  // q, k, v and their norms
  LinearWeights proj_mlp;        // [4C, C]
  LinearWeights proj_out;        // [C, 5C]
};

struct FluxDitWeights {
  LinearWeights x_embedder, context_embedder;
  LinearWeights time_1, time_2;          // time_text_embed.timestep_embedder.linear_{1,2}
  LinearWeights guidance_1, guidance_2;  // ... guidance_embedder (guidance_embeds only)
  LinearWeights text_1, text_2;          // time_text_embed.text_embedder.linear_{1,2}
  std::vector<FluxDoubleBlockWeights> double_blocks;
  std::vector<FluxSingleBlockWeights> single_blocks;
  LinearWeights norm_out;  // [2C, C]: scale, then shift
  LinearWeights proj_out;  // [patch^2 * out_channels, C]
};

// A tensor's float32 values by diffusers name and shape [rows, cols] (cols 1 for a vector):
// what the loaders ask for, one tensor at a time.
using FluxTensorSource =
    std::function<std::vector<float>(const std::string& name, int64_t rows, int64_t cols)>;
// Random weights drawn per diffusers tensor name from `seed` (linears uniform in
// [-1/sqrt(in), 1/sqrt(in)), biases and norm weights around 0 and 1), the same on every rank.
FluxTensorSource random_flux_source(uint64_t seed);
// Weights under diffusers' names (any float dtype, widened); shapes checked, errors name the
// tensor. The store must outlive the source.
FluxTensorSource store_flux_source(const WeightStore& store);

FluxDitWeights load_flux_weights(const FluxConfig& config, const FluxTensorSource& source);
FluxDitWeights random_flux_weights(const FluxConfig& config, uint64_t seed);
FluxDitWeights load_flux_weights(const FluxConfig& config, const WeightStore& store);
// Every tensor the model reads: diffusers' name and shape ([out, in] or [n]), in load order.
struct FluxTensorInfo {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<FluxTensorInfo> flux_tensor_names(const FluxConfig& config);

struct FluxDitShape {
  int64_t image_tokens = 0;  // L
  int64_t text_tokens = 0;   // J
  int64_t grid_width = 0;    // W, dividing L
};

// The step's conditioning: timestep (and guidance when the config embeds it) and the pooled
// text embedding [pooled_projection_dim].
struct FluxConditioning {
  float timestep = 0;
  float guidance = 0;
  std::vector<float> pooled;
};

class FluxDit {
 public:
  // Collective over ctx's ranks (plans the attention once for `shape`: sp_options picks the
  // method). Throws kInvalidArgument naming the config field or shape value that does not fit.
  FluxDit(const FluxConfig& config, FluxDitWeights weights, RankContext& ctx,
          const FluxDitShape& shape, const sp::PlanOptions& sp_options = {});
  ~FluxDit();

  // This rank's image tokens (0-based indices into the L image tokens) in local row order.
  const std::vector<int64_t>& local_image_tokens() const { return local_tokens_; }
  const sp::Plan& attention_plan() const { return attention_->plan(); }

  // Collective. image: this rank's rows of the packed latents, [local rows, in_channels];
  // text: [J, joint_attention_dim]. Returns this rank's rows of the prediction,
  // [local rows, patch^2 * out_channels].
  std::vector<float> forward(const std::vector<float>& image, const std::vector<float>& text,
                             const FluxConditioning& conditioning) const;

 private:
  struct Buffers;
  void double_block(const FluxDoubleBlockWeights& w, const std::vector<float>& temb,
                    std::vector<float>& x, std::vector<float>& c) const;
  void single_block(const FluxSingleBlockWeights& w, const std::vector<float>& temb,
                    std::vector<float>& x, std::vector<float>& c) const;
  // Joint attention: q/k/v of the text rows [J, H, D] and the image rows [L_r, H, D] (normed
  // and rotated here), outputs [J, C] and [L_r, C].
  void attend(std::vector<float>& qt, std::vector<float>& kt, std::vector<float>& vt,
              std::vector<float>& qx, std::vector<float>& kx, std::vector<float>& vx,
              const std::vector<float>& norm_q, const std::vector<float>& norm_k,
              const std::vector<float>& norm_added_q, const std::vector<float>& norm_added_k,
              std::vector<float>& out_t, std::vector<float>& out_x) const;

  FluxConfig config_;
  FluxDitWeights w_;
  FluxDitShape shape_;
  int64_t c_ = 0, heads_ = 0, d_ = 0, rows_ = 0;
  std::unique_ptr<sp::SpAttention> attention_;
  std::vector<int64_t> local_tokens_;
  std::vector<float> cos_t_, sin_t_, cos_x_, sin_x_;  // RoPE tables [tokens, D]
};

}  // namespace tessera::model
