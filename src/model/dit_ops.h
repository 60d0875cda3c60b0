// Float32 pieces the DiT layers (flux_dit.cc, cogvideox_block.cc) share on the cpu backend, on
// host vectors of rows x features, through model ops and the cpu linear.
#pragma once

#include <cstdint>
#include <vector>

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
// Per head of `rows` tokens [rows, heads, d]: RMSNorm (weight [d]) or LayerNorm (weight, bias
// [d]), eps as given.
void head_rms_norm(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                   const std::vector<float>& weight, float eps);
void head_layer_norm(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                     const std::vector<float>& weight, const std::vector<float>& bias, float eps);
// RoPE on interleaved pairs (x[2j], x[2j+1]) of every head, as diffusers' apply_rotary_emb
// (use_real_unbind_dim=-1): x * cos + rotated(x) * sin in float32; cos, sin [rows, d].
void rotate_interleaved(std::vector<float>& x, int64_t rows, int64_t heads, int64_t d,
                        const std::vector<float>& cos_t, const std::vector<float>& sin_t);

}  // namespace tessera::model::dit
