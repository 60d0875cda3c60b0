// The float32 attention reference: what the cpu backend runs, and what tests and benchmarks
// compare the kernels against. Inputs are cpu TensorViews (bf16, fp16 or f32, any strides with
// unit stride in D) with the layouts and mask semantics of attention.h.
//
// kInputRounding emulates an attention computed in the input precision (FlashAttention-3's
// "reference in bf16"): scores rounded to the input dtype, normalized probabilities rounded
// to it before the P*V product (accumulated in fp32). Its error against kFloat32 sets the
// tolerance of the kernel tests: max|kernel - f32| <= 2 * max|rounded - f32| + output rounding.
#pragma once

#include <span>
#include <vector>

#include "tessera/attn/attention.h"

namespace tessera::attn {

enum class ReferencePrecision { kFloat32, kInputRounding };

struct ReferenceResult {
  int64_t batch = 0, lq = 0, heads = 0, head_dim = 0;
  std::vector<float> o;    // [B, Lq, Hq, D] contiguous, normalized
  std::vector<float> lse;  // [B, Hq, Lq] contiguous, -inf for rows that see no key

  float o_at(int64_t b, int64_t i, int64_t h, int64_t d) const {
    return o[size_t(((b * lq + i) * heads + h) * head_dim + d)];
  }
  float lse_at(int64_t b, int64_t h, int64_t i) const {
    return lse[size_t((b * heads + h) * lq + i)];
  }
};

// Attention of q over the concatenation of the KV chunks (cpu tensors only).
ReferenceResult reference_attention(const TensorView& q, std::span<const KvChunk> kv,
                                    float softmax_scale,
                                    ReferencePrecision precision = ReferencePrecision::kFloat32);

}  // namespace tessera::attn
