// Float32 pieces the DiT layers (flux_dit.cc, cogvideox_block.cc) share on the cpu backend, on
// host vectors of rows x features, through model ops and the cpu linear.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/model/flux_dit.h"
#include "tessera/model/linear_weights.h"

namespace tessera::model::dit {

// x [rows, in] W^T (+ b) -> [rows, out]; out = weight.size() / in.
std::vector<float> dense(const LinearWeights& l, const std::vector<float>& x, int64_t rows,
                         int64_t in);
std::vector<float> silu(std::vector<float> x);
// layer_norm over each row (weight and bias empty: no affine), then * (1 + scale) + shift,
// shift and scale [c] (pointers into an adaLN linear's output).
std::vector<float> norm_modulate(const std::vector<float>& x, int64_t rows, int64_t c,
                                 const std::vector<float>& weight, const std::vector<float>& bias,
                                 float eps, const float* shift, const float* scale);
// x += gate * y, one gate per column of c.
void add_gated(std::vector<float>& x, const std::vector<float>& y, const float* gate, int64_t c);
// down(gelu_tanh(up(x))): the DiT feed-forward.
std::vector<float> gelu_mlp(const LinearWeights& up, const LinearWeights& down,
                            const std::vector<float>& x, int64_t rows, int64_t c);
// Per head of `rows` tokens [rows, heads, d]: RMSNorm (weight [d]) and RoPE on interleaved
// pairs with the tables cos, sin [rows, d] (model::head_rms_norm_rotary), or LayerNorm (weight,
// bias [d]); eps as given.
void head_rms_norm_rotary(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                          const std::vector<float>& weight, float eps,
                          const std::vector<float>& cos_t, const std::vector<float>& sin_t);
void head_layer_norm(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                     const std::vector<float>& weight, const std::vector<float>& bias, float eps);
// RoPE on interleaved pairs (x[2j], x[2j+1]) of every head, as diffusers' apply_rotary_emb
// (use_real_unbind_dim=-1): x * cos + rotated(x) * sin in float32; cos, sin [rows, d].
void rotate_interleaved(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                        const std::vector<float>& cos_t, const std::vector<float>& sin_t);

// diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0) of t * 1000, in
// float32: [cos(t f_i), sin(t f_i)], f_i = exp(-ln(10000) i / 128).
std::vector<float> timestep_sinusoid(float t);

// Flux's configuration and step shape, checked (kInvalidArgument naming the field): RoPE axes
// even and summing to attention_head_dim, at least one image token, a grid width dividing them.
void check_flux(const FluxConfig& config, const FluxDitShape& shape);

// Flux's RoPE tables [tokens, D] for image tokens (index t of a grid `grid_width` wide: position
// ids (0, t / W, t % W)): per axis i of dims d_i, pair j of the axis turns by a_i theta^(-2j/d_i)
// (theta 10000), in float64 as diffusers' get_1d_rotary_pos_embed, then cos and sin rounded to
// float32, each for both dims of the pair.
void flux_rope_tables(const std::vector<int64_t>& tokens, int64_t grid_width,
                      const std::vector<int64_t>& axes, std::vector<float>& cos_out,
                      std::vector<float>& sin_out);

}  // namespace tessera::model::dit
