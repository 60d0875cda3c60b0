// Internal: the float32 references of ops.h on cpu tensors, called by ops.cc after every
// argument was validated (shapes agree, dtypes match, ids and positions were range-checked).
#pragma once

#include "tessera/model/ops.h"

namespace tessera::model::detail {

void reference_rms_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                        float eps, const TensorView& out);
void reference_layer_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                          const TensorView& bias, float eps, const TensorView& out);
void reference_rope(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
                    const TensorView& out);
void reference_silu_and_mul(const TensorView& gate, const TensorView& up, const TensorView& out);
void reference_gelu_tanh(const TensorView& x, const TensorView& out);
void reference_adaln_modulate(const TensorView& x, const TensorView& shift, const TensorView& scale,
                              const TensorView& out);
void reference_gated_add(const TensorView& x, const TensorView& y, const TensorView& gate,
                         const TensorView& out);
void reference_silu(const TensorView& x, const TensorView& out);
void reference_head_rms_norm_rotary(const TensorView& x, const TensorView& weight, float eps,
                                    const TensorView& cos, const TensorView& sin,
                                    const TensorView& out);
void reference_embedding(const TensorView& ids, const TensorView& table, const TensorView& out);
void reference_scatter_rows(const TensorView& src, const TensorView& ids, const TensorView& table);
void reference_argmax(const TensorView& logits, const TensorView& out);

}  // namespace tessera::model::detail
