// The operands of an attention call as tessera.attention and tessera.attention_fp8 take them:
// q [B, Lq, Hq, D], k and v [B, Lkv, Hkv, D] checked against each other (names in every
// message), the causal mask at the given positions and the softmax scale (1/sqrt(D) unless
// given). Views come in already checked for dtype, rank and strides (arrays.h).
#pragma once

#include <cstdint>
#include <optional>

#include "tessera/attn/attention.h"
#include "tessera/core/tensor_view.h"

namespace tessera::python {

struct Operands {
  TensorView q, k, v;
  attn::MaskSpec mask;
  float softmax_scale = 1.0f;
};

Operands attention_operands(TensorView q, TensorView k, TensorView v, bool causal,
                            std::optional<double> softmax_scale, int64_t q_start, int64_t kv_start);

}  // namespace tessera::python
