// FP8 (e4m3) attention with per-head scales: quantization helpers and the float32 reference
// (cpu tensors), and forward_fp8, which runs the reference on cpu streams and the sm90 FP8
// kernel on cuda streams. Layouts of attention.h.
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
#include "tessera/runtime/stream.h"

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

// ---- The FP8 forward (cpu: the reference above; cuda: the sm90 kernel) -----------------------

// The descales as f32 tensors [Hq], [Hkv], [Hkv] (contiguous) on the stream's device, as
// TransformerEngine and FlashAttention-3 keep them: quantization on the GPU writes them there,
// and a captured graph reads them at replay.
struct Fp8DescaleTensors {
  TensorView q, k, v;
};

// Device bytes forward_fp8 needs in `workspace` for v [B, Lkv, Hkv, D] on `stream`: V's
// transposed copy (FP8 WGMMA reads its B operand K-major only), B Hkv D Lkv rounded up to 128
// keys; 0 on the cpu backend.
int64_t fp8_workspace_bytes(const TensorView& v, const Stream& stream);

// o = attention of fp8_e4m3 q [B, Lq, Hq, D] over fp8_e4m3 k, v [B, Lkv, Hkv, D] with
// per-head descales (the scores are softmax_scale * descale_q * descale_k * <q8, k8>; the output
// is scaled by descale_v), `mask` as attention.h's forward; lse f32 [B, Hq, Lq] or empty.
// cuda: o bf16, D 128 or 256, the layout rules of attention.h (16-byte aligned bases and
// strides), a workspace of at least fp8_workspace_bytes (any dtype, 16-byte aligned, on the
// stream's device; its contents are overwritten); P is rounded to e4m3 before the PV product, as
// FlashAttention-3 does, so the result differs from reference_attention_fp8 by that rounding.
// cpu: reference_attention_fp8 (o bf16, f16 or f32; workspace ignored, may be empty).
void forward_fp8(const TensorView& q, const TensorView& k, const TensorView& v,
                 const Fp8DescaleTensors& descales, const MaskSpec& mask, float softmax_scale,
                 const TensorView& o, const TensorView& lse, const TensorView& workspace,
                 const Stream& stream);

}  // namespace tessera::attn
