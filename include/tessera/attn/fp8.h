// FP8 (e4m3) attention inputs with per-head scales: quantization helpers and the float32
// reference an FP8 kernel is checked against. cpu tensors only; layouts of attention.h.
//
// Per-head quantization (TransformerEngine's current scaling, applied to each head instead of
// the whole tensor, as issue 17 asks and FlashAttention-3's descale_{q,k,v} take it):
//   amax_h = max over (b, l, d) of |x[b, l, h, d]|
//   descale_h = amax_h / 448      (1 when amax_h = 0; TransformerEngine's scale_inv)
//   x8[b, l, h, d] = e4m3(x[b, l, h, d] / descale_h)   (nearest even, saturating at +-448)
//   x[b, l, h, d] ~ x8[b, l, h, d] * descale_h
// so each head uses the whole e4m3 range. Per head rather than per tensor: heads differ in
// magnitude by orders (outlier heads, attention sinks), and one scale for all would push the
// small heads into e4m3's subnormals. The quantization error of one element is at most half a
// step: |x - x8 descale_h| <= 2^-4 |x| + 2^-10 descale_h (2^-10: half the subnormal step 2^-9).
#pragma once

#include <span>
#include <vector>

#include "tessera/attn/attention.h"

namespace tessera::attn {

// descale_h for every head of x [B, L, H, D] (any float dtype): H values. Throws naming the
// head if its amax is not finite.
std::vector<float> fp8_head_descales(const TensorView& x);

// out[b, l, h, d] = e4m3(x[b, l, h, d] / descales[h]). x [B, L, H, D] of any float dtype, out
// fp8_e4m3 of x's shape (any strides, unit stride in D), descales H finite values > 0.
void quantize_fp8_per_head(const TensorView& x, std::span<const float> descales,
                           const TensorView& out);

// The per-head descales of q [Hq], k [Hkv] and v [Hkv].
struct Fp8Descales {
  std::span<const float> q, k, v;
};

// Attention of fp8_e4m3 q [B, Lq, Hq, D] over k, v [B, Lkv, Hkv, D]: every element is
// dequantized (x8 * descale of its head) to float32, then reference_attention (kFloat32) runs
// with `mask`; o [B, Lq, Hq, D] (bf16, f16 or f32) gets the result rounded to nearest even,
// lse f32 [B, Hq, Lq] (or an empty view: not written) the log-sum-exp of the scaled scores.
// softmax_scale applies to the dequantized scores (as FlashAttention-3's FP8 forward).
void reference_attention_fp8(const TensorView& q, const TensorView& k, const TensorView& v,
                             const Fp8Descales& descales, const MaskSpec& mask, float softmax_scale,
                             const TensorView& o, const TensorView& lse);

}  // namespace tessera::attn
