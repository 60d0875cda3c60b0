// Internal: what ops.cc hands the cuda backend after validating every argument (the same
// arguments as the references of ops_reference.h, plus the stream). Implemented in
// src/model/cuda/ops_cuda.cc (built only with TESSERA_CUDA=ON).
#pragma once

#include "tessera/model/ops.h"

namespace tessera::model::detail {

#ifdef TESSERA_WITH_CUDA
void cuda_rms_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                   float eps, const TensorView& out, const Stream& stream);
void cuda_layer_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                     const TensorView& bias, float eps, const TensorView& out,
                     const Stream& stream);
void cuda_rope(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
               const TensorView& out, const Stream& stream);
void cuda_silu_and_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
                       const Stream& stream);
void cuda_gelu_tanh(const TensorView& x, const TensorView& out, const Stream& stream);
void cuda_adaln_modulate(const TensorView& x, const TensorView& shift, const TensorView& scale,
                         const TensorView& out, const Stream& stream);
void cuda_gated_add(const TensorView& x, const TensorView& y, const TensorView& gate,
                    const TensorView& out, const Stream& stream);
void cuda_silu(const TensorView& x, const TensorView& out, const Stream& stream);
void cuda_head_rms_norm_rotary(const TensorView& x, const TensorView& weight, float eps,
                               const TensorView& cos, const TensorView& sin,
                               const TensorView& out, const Stream& stream);
void cuda_embedding(const TensorView& ids, const TensorView& table, const TensorView& out,
                    const Stream& stream);
void cuda_scatter_rows(const TensorView& src, const TensorView& ids, const TensorView& table,
                       const Stream& stream);
void cuda_argmax(const TensorView& logits, const TensorView& out, const Stream& stream);
#endif

}  // namespace tessera::model::detail
