// The cuda backend of the layer operations (ops_backend.h): validated views lowered to the
// kernels' plain parameter structs (kernels/ops/ops_launch.h). Nothing here allocates or
// synchronizes.
#include "model/ops_backend.h"
#include "ops/ops_launch.h"
#include "tessera/core/error.h"

namespace tessera::model::detail {

namespace {

namespace k = kernels;

k::Element element_of(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return k::Element::kF32;
    case DType::kBF16:
      return k::Element::kBF16;
    case DType::kF16:
      return k::Element::kF16;
    default:
      break;
  }
  throw_error(ErrorCode::kInternal, str("layer op on dtype ", dtype_name(dtype)));
}

k::IndexType index_of(DType dtype) {
  return dtype == DType::kI64 ? k::IndexType::kI64 : k::IndexType::kI32;
}

k::NormParams norm_params(const TensorView& x, const Residual& residual, const TensorView& weight,
                          const TensorView& bias, float eps, const TensorView& out) {
  k::NormParams p;
  p.element = element_of(x.dtype());
  p.rows = x.size(0);
  p.cols = x.size(1);
  p.x = x.data();
  p.x_stride = x.stride(0);
  if (!residual.in.empty()) {
    p.residual = residual.in.data();
    p.residual_stride = residual.in.stride(0);
    p.residual_out = residual.out.data();
    p.residual_out_stride = residual.out.stride(0);
  }
  p.weight = weight.empty() ? nullptr : weight.data();
  p.bias = bias.empty() ? nullptr : bias.data();
  p.eps = eps;
  p.out = out.data();
  p.out_stride = out.stride(0);
  return p;
}

// A [N, C] rows view as a pointwise operand (batch 1).
k::Operand rows_operand(const TensorView& t) {
  return {t.data(), 0, t.stride(0)};
}

// out = op(x) over [N, C] rows.
void launch_unary(k::PointwiseOp op, const TensorView& x, const TensorView& out,
                  const Stream& stream) {
  k::PointwiseParams p;
  p.element = element_of(x.dtype());
  p.op = op;
  p.rows = x.size(0);
  p.cols = x.size(1);
  p.a = rows_operand(x);
  p.out = out.data();
  p.out_stride_row = out.stride(0);
  k::launch_pointwise(p, stream.cuda_stream());
}

}  // namespace

void cuda_rms_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                   float eps, const TensorView& out, const Stream& stream) {
  k::launch_norm(norm_params(x, residual, weight, TensorView{}, eps, out), stream.cuda_stream());
}

void cuda_layer_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                     const TensorView& bias, float eps, const TensorView& out,
                     const Stream& stream) {
  k::NormParams p = norm_params(x, residual, weight, bias, eps, out);
  p.layer_norm = true;
  k::launch_norm(p, stream.cuda_stream());
}

void cuda_rope(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
               const TensorView& out, const Stream& stream) {
  k::RopeParams p;
  p.element = element_of(x.dtype());
  p.tokens = x.size(0);
  p.heads = x.size(1);
  p.dim = x.size(2);
  p.half = inv_freq.size(0);
  p.x = x.data();
  p.x_stride_token = x.stride(0);
  p.x_stride_head = x.stride(1);
  p.out = out.data();
  p.out_stride_token = out.stride(0);
  p.out_stride_head = out.stride(1);
  p.positions = positions.data();
  p.position_type = index_of(positions.dtype());
  p.position_stride = positions.stride(0);
  p.inv_freq = inv_freq.data_as<const float>();
  p.inv_freq_stride = inv_freq.stride(0);
  k::launch_rope(p, stream.cuda_stream());
}

void cuda_silu_and_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
                       const Stream& stream) {
  k::PointwiseParams p;
  p.element = element_of(gate.dtype());
  p.op = k::PointwiseOp::kSiluAndMul;
  p.rows = gate.size(0);
  p.cols = gate.size(1);
  p.a = rows_operand(gate);
  p.b = rows_operand(up);
  p.out = out.data();
  p.out_stride_row = out.stride(0);
  k::launch_pointwise(p, stream.cuda_stream());
}

void cuda_gelu_tanh(const TensorView& x, const TensorView& out, const Stream& stream) {
  launch_unary(k::PointwiseOp::kGeluTanh, x, out, stream);
}

namespace {

// An op over x, out [B, L, C] with operands b, c: [B, L, C] (b_per_token) or [B, C] broadcast
// over the L tokens.
void launch_tokens(k::PointwiseOp op, const TensorView& x, const TensorView& b, bool b_per_token,
                   const TensorView& c, const TensorView& out, const Stream& stream) {
  k::PointwiseParams p;
  p.element = element_of(x.dtype());
  p.op = op;
  p.batch = x.size(0);
  p.rows = x.size(1);
  p.cols = x.size(2);
  p.a = {x.data(), x.stride(0), x.stride(1)};
  p.b = {b.data(), b.stride(0), b_per_token ? b.stride(1) : 0};
  p.c = {c.data(), c.stride(0), 0};
  p.out = out.data();
  p.out_stride_batch = out.stride(0);
  p.out_stride_row = out.stride(1);
  k::launch_pointwise(p, stream.cuda_stream());
}

}  // namespace

void cuda_adaln_modulate(const TensorView& x, const TensorView& shift, const TensorView& scale,
                         const TensorView& out, const Stream& stream) {
  launch_tokens(k::PointwiseOp::kAdalnModulate, x, shift, false, scale, out, stream);
}

void cuda_gated_add(const TensorView& x, const TensorView& y, const TensorView& gate,
                    const TensorView& out, const Stream& stream) {
  launch_tokens(k::PointwiseOp::kGatedAdd, x, y, true, gate, out, stream);
}

void cuda_silu(const TensorView& x, const TensorView& out, const Stream& stream) {
  launch_unary(k::PointwiseOp::kSilu, x, out, stream);
}

void cuda_head_rms_norm_rotary(const TensorView& x, const TensorView& weight, float eps,
                               const TensorView& cos, const TensorView& sin,
                               const TensorView& out, const Stream& stream) {
  k::HeadNormRotaryParams p;
  p.element = element_of(x.dtype());
  p.tokens = x.size(0);
  p.heads = x.size(1);
  p.dim = x.size(2);
  p.x = x.data();
  p.x_stride_token = x.stride(0);
  p.x_stride_head = x.stride(1);
  p.out = out.data();
  p.out_stride_token = out.stride(0);
  p.out_stride_head = out.stride(1);
  p.weight = weight.data();
  p.eps = eps;
  if (!cos.empty()) {
    p.cos = cos.data_as<const float>();
    p.sin = sin.data_as<const float>();
    p.cos_stride = cos.stride(0);
    p.sin_stride = sin.stride(0);
  }
  k::launch_head_norm_rotary(p, stream.cuda_stream());
}

namespace {

// embedding (out[n] = table[ids[n]]) and scatter_rows (table[ids[n]] = rows[n]): one kernel.
void launch_row_copy(const TensorView& ids, const TensorView& table, const TensorView& rows,
                     bool scatter, const Stream& stream) {
  k::EmbeddingParams p;
  p.scatter = scatter;
  p.element_bytes = int(table.element_size());
  p.tokens = rows.size(0);
  p.cols = rows.size(1);
  p.vocab = table.size(0);
  p.ids = ids.data();
  p.id_type = index_of(ids.dtype());
  p.id_stride = ids.stride(0);
  p.table = table.data();
  p.table_stride = table.stride(0);
  p.out = rows.data();
  p.out_stride = rows.stride(0);
  k::launch_embedding(p, stream.cuda_stream());
}

}  // namespace

void cuda_embedding(const TensorView& ids, const TensorView& table, const TensorView& out,
                    const Stream& stream) {
  launch_row_copy(ids, table, out, false, stream);
}

void cuda_scatter_rows(const TensorView& src, const TensorView& ids, const TensorView& table,
                       const Stream& stream) {
  launch_row_copy(ids, table, src, true, stream);
}

void cuda_argmax(const TensorView& logits, const TensorView& out, const Stream& stream) {
  k::ArgmaxParams p;
  p.element = element_of(logits.dtype());
  p.rows = logits.size(0);
  p.vocab = logits.size(1);
  p.logits = logits.data();
  p.logits_stride = logits.stride(0);
  p.out = out.data();
  p.out_type = index_of(out.dtype());
  p.out_stride = out.stride(0);
  k::launch_argmax(p, stream.cuda_stream());
}

}  // namespace tessera::model::detail
