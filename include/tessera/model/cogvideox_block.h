// CogVideoXBlock: one transformer block of CogVideoX (diffusers' CogVideoXBlock) on the cpu
// backend, float32, its attention sequence parallel through sp::SpAttention (video tokens
// sharded in the plan's layout, text tokens replicated as its joint tokens):
//   shift, scale, gate, enc_shift, enc_scale, enc_gate = norm1.linear(silu(temb))
//   n_x = layer_norm(x) * (1 + scale) + shift;  n_c likewise with the enc_ terms (one LayerNorm,
//         affine, eps norm_eps, shared by video and text)
//   q, k, v = to_q/k/v([n_c, n_x]) (bias when attention_bias), LayerNorm per head (eps 1e-6,
//         affine), RoPE on the video tokens only when given, joint attention, to_out.0
//   x += gate * attn_x;  c += enc_gate * attn_c
//   the same modulation from norm2, then ff (Linear(C, 4C), gelu(tanh), Linear(4C, C)) on
//   [n_c, n_x];  x += gate_ff * ff_x;  c += enc_gate_ff * ff_c
// The patch embedding, positional embeddings and output head of the whole model are not built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/model/linear_weights.h"
#include "tessera/model/model_config.h"
#include "tessera/model/weight_store.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::model {

struct CogVideoXBlockWeights {
  LinearWeights norm1, norm2;                     // [6C, time_embed_dim]
  std::vector<float> norm1_weight, norm1_bias;    // norm1.norm: [C] (affine configs)
  std::vector<float> norm2_weight, norm2_bias;
  LinearWeights q, k, v, out;                     // attn1.to_q/k/v, attn1.to_out.0
  std::vector<float> norm_q_weight, norm_q_bias;  // attn1.norm_q / norm_k: [D]
  std::vector<float> norm_k_weight, norm_k_bias;
  LinearWeights ff_up, ff_down;  // ff.net.0.proj [4C, C], ff.net.2 [C, 4C]
};

// Random weights per diffusers name `transformer_blocks.{index}.…` from `seed`, or loaded from a
// store under those names (errors name the tensor).
CogVideoXBlockWeights random_cogvideox_block(const CogVideoXConfig& config, int64_t index,
                                             uint64_t seed);
CogVideoXBlockWeights load_cogvideox_block(const CogVideoXConfig& config, int64_t index,
                                           const WeightStore& store);

class CogVideoXBlock {
 public:
  // `attention`: planned for this block's shape (heads, head_dim, J text tokens as joint
  // tokens, f32), shared by the model's blocks; must outlive the block.
  CogVideoXBlock(const CogVideoXConfig& config, CogVideoXBlockWeights weights,
                 sp::SpAttention& attention);

  // Collective. x [L_r, C]: this rank's video rows (attention.local_tokens() order); c [J, C]
  // the text rows; temb [time_embed_dim]. rope_cos/sin [L_r, D] for the video rows, or empty
  // (no RoPE). Updates x and c in place.
  void forward(std::vector<float>& x, std::vector<float>& c, const std::vector<float>& temb,
               const std::vector<float>& rope_cos, const std::vector<float>& rope_sin) const;

 private:
  CogVideoXConfig config_;
  CogVideoXBlockWeights w_;
  sp::SpAttention* attention_ = nullptr;
  int64_t c_ = 0, heads_ = 0, d_ = 0;
};

}  // namespace tessera::model
