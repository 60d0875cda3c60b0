// The layer operations of the model runtime besides attention and GEMM: the pieces a
// Llama-family decoder layer and a DiT block (Flux, CogVideoX) are built from. One API for both
// backends: tensors on cpu run the float32 reference (src/model/ops_reference.cc), tensors on
// cuda run the kernels of kernels/ops/.
//
// Tensors: "rows" are [N, C] views with unit stride in C and any row stride (so slices of
// larger buffers, e.g. the gate half of a fused gate/up projection, need no copy). Every float
// tensor of a call has one dtype, bf16, f16 or f32; arithmetic is in float32 and each output
// element is rounded once to the dtype (inputs are read exactly). N = 0 is a no-op. An output
// may be the very same view as an input (in place) but must not otherwise overlap one.
//
// Streams: every call takes one; cpu streams run inline. cuda calls neither allocate nor
// synchronize, so they can be captured in a CUDA graph; tensors must be on the stream's
// device. Argument errors throw kInvalidArgument naming the argument; ids or positions outside
// their range are found on the host for cpu tensors (kInvalidArgument naming the element) and
// trap in the kernel for cuda tensors (a printf names the element).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor_view.h"
#include "tessera/model/model_config.h"
#include "tessera/runtime/stream.h"

namespace tessera::model {

// A fused residual add for the norms: h = x + residual.in, rounded to the dtype, written to
// residual.out (the residual stream the next layer adds to), and normalized. Both empty: no
// residual, h = x. residual.out may be residual.in or x (in place).
struct Residual {
  TensorView in;   // [N, C]
  TensorView out;  // [N, C]
};

// out = h / sqrt(mean(h^2) + eps) * weight over each row (Llama's RMSNorm).
//   x, out [N, C]; weight [C]; eps finite and > 0.
void rms_norm(const TensorView& x, const Residual& residual, const TensorView& weight, float eps,
              const TensorView& out, const Stream& stream);

// out = (h - mean(h)) / sqrt(var(h) + eps) * weight + bias over each row (biased variance, as
// torch's LayerNorm). weight and bias are [C] or empty (Flux's adaLN norms have neither).
void layer_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                const TensorView& bias, float eps, const TensorView& out, const Stream& stream);

// RoPE inverse frequencies theta^(-2i/R) for i < R/2 (R = rotary_dim, even), with Llama 3's
// "llama3" scaling when `scaling.llama3` (as transformers' _compute_llama3_parameters), in
// float64 rounded once. Plan-time host work: upload the result once, pass it to rope().
std::vector<float> rope_inv_freq(int64_t rotary_dim, double theta, const RopeScaling& scaling);

// Rotary embedding in rotate-half form (Llama, Qwen2; GPT-NeoX style) on the first R dims of
// every head, R = 2 * inv_freq's length <= D; dims [R, D) pass through:
//   angle = float(positions[t]) * inv_freq[i]                 (float32, as transformers)
//   out[t, h, i]       = x[t, h, i] cos(angle) - x[t, h, i + R/2] sin(angle)      i < R/2
//   out[t, h, i + R/2] = x[t, h, i + R/2] cos(angle) + x[t, h, i] sin(angle)
//   x, out [T, H, D] (unit stride in D, any other strides: q and k of a packed qkv projection);
//   positions i32 or i64 [T], each >= 0; inv_freq f32 [R/2] on the stream's device.
void rope(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
          const TensorView& out, const Stream& stream);

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up (Llama's gated MLP); all [N, F].
void silu_and_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
                  const Stream& stream);

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (torch's gelu(approximate="tanh"),
// the DiT feed-forward's); x, out [N, C].
void gelu_tanh(const TensorView& x, const TensorView& out, const Stream& stream);

// adaLN modulation: out[b, l, c] = x[b, l, c] * (1 + scale[b, c]) + shift[b, c] (the shift and
// scale of a DiT block's conditioning, one per batch entry, broadcast over the L tokens).
//   x, out [B, L, C] (unit stride in C); shift, scale [B, C] (unit stride in C: chunks of the
//   adaLN linear's output work).
void adaln_modulate(const TensorView& x, const TensorView& shift, const TensorView& scale,
                    const TensorView& out, const Stream& stream);

// out = x + gate * y: a DiT block's gated residual add, gate [B, C] broadcast over the L tokens
// (as adaln_modulate's shift and scale). x, y, out [B, L, C] (unit stride in C); out may be x.
void gated_add(const TensorView& x, const TensorView& y, const TensorView& gate,
               const TensorView& out, const Stream& stream);

// out = silu(x) = x / (1 + exp(-x)) (what a DiT's adaLN linears read); x, out [N, C].
void silu(const TensorView& x, const TensorView& out, const Stream& stream);

// Flux's treatment of q and k, per head row of x [T, H, D] (unit stride in D, any other
// strides: q and k inside a packed qkv projection): RMSNorm over D, then, with tables, RoPE on
// interleaved pairs as diffusers' apply_rotary_emb (use_real_unbind_dim=-1), in float32:
//   n = x / sqrt(mean(x^2) + eps) * weight
//   out[2j]     = n[2j] cos[t, 2j] - n[2j + 1] sin[t, 2j]
//   out[2j + 1] = n[2j + 1] cos[t, 2j + 1] + n[2j] sin[t, 2j + 1]
// weight [D] of x's dtype; cos, sin f32 [T, D] (unit stride in D), or both empty (no rotation);
// D even; out may be x.
void head_rms_norm_rotary(const TensorView& x, const TensorView& weight, float eps,
                          const TensorView& cos, const TensorView& sin, const TensorView& out,
                          const Stream& stream);

// out[n, :] = table[ids[n], :]; ids i32 or i64 [N], each in [0, V); table [V, C]; out [N, C].
void embedding(const TensorView& ids, const TensorView& table, const TensorView& out,
               const Stream& stream);

// table[ids[n], :] = src[n, :]: embedding's inverse, a row scatter (writing new keys and values
// into the rows of a paged KV cache, vLLM's reshape_and_cache). src [N, C]; ids i32 or i64 [N],
// each in [0, R) and distinct (which of two writes to one row lands is not defined); table
// [R, C], src's dtype.
void scatter_rows(const TensorView& src, const TensorView& ids, const TensorView& table,
                  const Stream& stream);

// Greedy sampling: out[n] = the index of the largest logits[n, v] (the lowest index among
// equals; NaN counts as larger than every number, as torch.argmax). logits [N, V] with V >= 1;
// out i32 or i64 [N] (i32 needs V <= 2^31 - 1).
void argmax(const TensorView& logits, const TensorView& out, const Stream& stream);

}  // namespace tessera::model
