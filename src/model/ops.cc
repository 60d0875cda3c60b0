// Public layer operations (ops.h): validate every argument, then run the float32 reference for
// cpu tensors or hand the validated views to the cuda backend.
#include "tessera/model/ops.h"

#include <cmath>
#include <string>

#include "model/ops_backend.h"
#include "model/ops_reference.h"
#include "tessera/core/error.h"

namespace tessera::model {

namespace {

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}
bool is_index(DType d) {
  return d == DType::kI32 || d == DType::kI64;
}

bool on_cpu(const Stream& stream) {
  return stream.backend() == Backend::kCpu;
}

void check_on_stream(const TensorView& t, const Stream& stream, const char* what) {
  const Device want = on_cpu(stream) ? Device::cpu() : stream.device();
  TESSERA_CHECK_ARG(t.device() == want, what, " = ", t.to_string(), " is on ",
                    t.device().to_string(), ": expected ", want.to_string(),
                    " (the stream's device)");
}

void check_has_data(const TensorView& t, const char* what) {
  TESSERA_CHECK_ARG(!t.empty() || t.numel() == 0, what, " = ", t.to_string(), " has no data");
}

// [N, C] with unit stride in C, a float dtype, on the stream's device.
void check_rows(const TensorView& t, const Stream& stream, const char* what) {
  TESSERA_CHECK_ARG(t.ndim() == 2, what, " = ", t.to_string(), ": expected 2 dims [N, C]");
  TESSERA_CHECK_ARG(t.size(1) >= 1, what, " = ", t.to_string(), ": expected C >= 1");
  TESSERA_CHECK_ARG(t.stride(1) == 1 || t.size(1) == 1, what, " = ", t.to_string(), " has stride ",
                    t.stride(1), " in C: expected 1");
  TESSERA_CHECK_ARG(is_float(t.dtype()), what, " has dtype ", dtype_name(t.dtype()),
                    ": expected bf16, f16 or f32");
  check_has_data(t, what);
  check_on_stream(t, stream, what);
}

// [B, L, C] with unit stride in C, a float dtype, on the stream's device.
void check_tokens(const TensorView& t, const Stream& stream, const char* what) {
  TESSERA_CHECK_ARG(t.ndim() == 3, what, " = ", t.to_string(), ": expected 3 dims [B, L, C]");
  TESSERA_CHECK_ARG(t.size(2) >= 1 && (t.size(2) == 1 || t.stride(2) == 1), what, " = ",
                    t.to_string(), ": expected C >= 1 with stride 1");
  TESSERA_CHECK_ARG(is_float(t.dtype()), what, " has dtype ", dtype_name(t.dtype()),
                    ": expected bf16, f16 or f32");
  check_has_data(t, what);
  check_on_stream(t, stream, what);
}

void check_shape(const TensorView& t, const TensorView& like, const char* what,
                 const char* like_name) {
  bool same = t.ndim() == like.ndim();
  for (int d = 0; same && d < t.ndim(); ++d) same = t.size(d) == like.size(d);
  TESSERA_CHECK_ARG(same, what, " = ", t.to_string(), ": expected the shape of ", like_name, " = ",
                    like.to_string());
}

void check_same_dtype(const TensorView& t, const TensorView& like, const char* what,
                      const char* like_name) {
  TESSERA_CHECK_ARG(t.dtype() == like.dtype(), what, " has dtype ", dtype_name(t.dtype()),
                    ": expected ", dtype_name(like.dtype()), " (", like_name, "'s)");
}

// A [C] vector of x's dtype on the stream's device.
void check_vector(const TensorView& t, int64_t c, const TensorView& x, const Stream& stream,
                  const char* what) {
  TESSERA_CHECK_ARG(t.ndim() == 1 && t.size(0) == c, what, " = ", t.to_string(), ": expected [", c,
                    "] (C of x)");
  TESSERA_CHECK_ARG(t.stride(0) == 1 || c == 1, what, " = ", t.to_string(), ": expected stride 1");
  check_same_dtype(t, x, what, "x");
  check_has_data(t, what);
  check_on_stream(t, stream, what);
}

// An output may be exactly an input (in place) but must not otherwise share bytes with it.
void check_no_partial_overlap(const TensorView& out, const TensorView& in, const char* out_name,
                              const char* in_name) {
  if (out.empty() || in.empty() || out.numel() == 0 || in.numel() == 0) return;
  const auto* a = static_cast<const char*>(out.data());
  const auto* b = static_cast<const char*>(in.data());
  const bool overlap = a < b + in.span_bytes() && b < a + out.span_bytes();
  bool same = a == b && out.ndim() == in.ndim() && out.dtype() == in.dtype();
  for (int d = 0; same && d < out.ndim(); ++d)
    same = out.size(d) == in.size(d) && (out.stride(d) == in.stride(d) || out.size(d) == 1);
  TESSERA_CHECK_ARG(!overlap || same, out_name, " = ", out.to_string(), " overlaps ", in_name,
                    " = ", in.to_string(),
                    ": expected the same view (in place) or no shared bytes");
}

// t [B, C] of x [B, L, C] (a value per batch entry and feature, broadcast over the L tokens),
// x's dtype, not overlapping out.
void check_per_batch(const TensorView& t, const TensorView& x, const TensorView& out,
                     const Stream& stream, const char* what) {
  check_rows(t, stream, what);
  TESSERA_CHECK_ARG(t.size(0) == x.size(0) && t.size(1) == x.size(2), what, " = ", t.to_string(),
                    ": expected [", x.size(0), ", ", x.size(2), "] [B, C] of x");
  check_same_dtype(t, x, what, "x");
  check_no_partial_overlap(out, t, "out", what);
}

// x and out [N, C] of one shape and dtype, out x itself or apart from it.
void check_elementwise(const TensorView& x, const TensorView& out, const Stream& stream) {
  check_rows(x, stream, "x");
  check_rows(out, stream, "out");
  check_shape(out, x, "out", "x");
  check_same_dtype(out, x, "out", "x");
  check_no_partial_overlap(out, x, "out", "x");
}

void check_eps(float eps) {
  TESSERA_CHECK_ARG(std::isfinite(eps) && eps > 0, "eps = ", eps, ": expected a finite value > 0");
}

// x rows, the optional residual and out: one shape, one dtype, no partial overlaps.
void check_norm_rows(const TensorView& x, const Residual& residual, const TensorView& out,
                     const Stream& stream) {
  check_rows(x, stream, "x");
  check_rows(out, stream, "out");
  check_shape(out, x, "out", "x");
  check_same_dtype(out, x, "out", "x");
  TESSERA_CHECK_ARG(residual.in.empty() == residual.out.empty(), "residual.",
                    residual.in.empty() ? "in" : "out", " is empty but residual.",
                    residual.in.empty() ? "out" : "in",
                    " is not: expected both (fused residual add) or neither");
  check_no_partial_overlap(out, x, "out", "x");
  if (residual.in.empty()) return;
  check_rows(residual.in, stream, "residual.in");
  check_rows(residual.out, stream, "residual.out");
  check_shape(residual.in, x, "residual.in", "x");
  check_shape(residual.out, x, "residual.out", "x");
  check_same_dtype(residual.in, x, "residual.in", "x");
  check_same_dtype(residual.out, x, "residual.out", "x");
  check_no_partial_overlap(residual.out, x, "residual.out", "x");
  check_no_partial_overlap(residual.out, residual.in, "residual.out", "residual.in");
  check_no_partial_overlap(out, residual.in, "out", "residual.in");
  check_no_partial_overlap(out, residual.out, "out", "residual.out");
  // out is written after residual.out is read back: they must be distinct.
  TESSERA_CHECK_ARG(out.data() != residual.out.data() || out.numel() == 0,
                    "out and residual.out are the same tensor: expected two outputs");
}

// An index vector [N] of i32 or i64 on the stream's device.
void check_index_vector(const TensorView& t, int64_t n, const Stream& stream, const char* what) {
  TESSERA_CHECK_ARG(t.ndim() == 1 && t.size(0) == n, what, " = ", t.to_string(), ": expected [", n,
                    "]");
  TESSERA_CHECK_ARG(is_index(t.dtype()), what, " has dtype ", dtype_name(t.dtype()),
                    ": expected i32 or i64");
  check_has_data(t, what);
  check_on_stream(t, stream, what);
}

// cpu only (cuda kernels trap instead): every index in [0, limit).
void check_index_range(const TensorView& t, int64_t limit, const char* what,
                       const char* limit_name) {
  for (int64_t i = 0; i < t.size(0); ++i) {
    const int64_t v = t.dtype() == DType::kI64 ? t.data_as<int64_t>()[i * t.stride(0)]
                                               : t.data_as<int32_t>()[i * t.stride(0)];
    TESSERA_CHECK_ARG(v >= 0 && v < limit, what, "[", i, "] = ", v, ": expected 0 to ", limit - 1,
                      " (", limit_name, ")");
  }
}

}  // namespace

void rms_norm(const TensorView& x, const Residual& residual, const TensorView& weight, float eps,
              const TensorView& out, const Stream& stream) {
  check_norm_rows(x, residual, out, stream);
  check_vector(weight, x.size(1), x, stream, "weight");
  check_eps(eps);
  if (x.size(0) == 0) return;
  if (on_cpu(stream)) return detail::reference_rms_norm(x, residual, weight, eps, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_rms_norm(x, residual, weight, eps, out, stream);
#endif
}

void layer_norm(const TensorView& x, const Residual& residual, const TensorView& weight,
                const TensorView& bias, float eps, const TensorView& out, const Stream& stream) {
  check_norm_rows(x, residual, out, stream);
  if (!weight.empty()) check_vector(weight, x.size(1), x, stream, "weight");
  if (!bias.empty()) check_vector(bias, x.size(1), x, stream, "bias");
  check_eps(eps);
  if (x.size(0) == 0) return;
  if (on_cpu(stream)) return detail::reference_layer_norm(x, residual, weight, bias, eps, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_layer_norm(x, residual, weight, bias, eps, out, stream);
#endif
}

std::vector<float> rope_inv_freq(int64_t rotary_dim, double theta, const RopeScaling& s) {
  TESSERA_CHECK_ARG(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= 65536,
                    "rotary_dim = ", rotary_dim, ": expected an even number from 2 to 65536");
  TESSERA_CHECK_ARG(std::isfinite(theta) && theta > 0, "theta = ", theta,
                    ": expected a finite value > 0");
  if (s.llama3)
    TESSERA_CHECK_ARG(std::isfinite(s.factor) && s.factor >= 1 && s.low_freq_factor > 0 &&
                          s.high_freq_factor > s.low_freq_factor &&
                          std::isfinite(s.high_freq_factor) &&
                          s.original_max_position_embeddings >= 1,
                      "rope scaling (factor ", s.factor, ", low_freq_factor ", s.low_freq_factor,
                      ", high_freq_factor ", s.high_freq_factor, ", original_max_position ",
                      s.original_max_position_embeddings,
                      "): expected factor >= 1, 0 < low_freq_factor < high_freq_factor, "
                      "original_max_position >= 1");
  constexpr double kPi = 3.14159265358979323846;
  const double low_wavelen = double(s.original_max_position_embeddings) / s.low_freq_factor;
  const double high_wavelen = double(s.original_max_position_embeddings) / s.high_freq_factor;
  std::vector<float> out(size_t(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    double f = std::pow(theta, -2.0 * double(i) / double(rotary_dim));
    if (s.llama3) {  // long wavelengths slowed by `factor`, short ones kept, a smooth band between
      const double wavelen = 2 * kPi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (double(s.original_max_position_embeddings) / wavelen - s.low_freq_factor) /
            (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    out[size_t(i)] = float(f);
  }
  return out;
}

void rope(const TensorView& x, const TensorView& positions, const TensorView& inv_freq,
          const TensorView& out, const Stream& stream) {
  for (auto [t, what] : {std::pair{&x, "x"}, std::pair{&out, "out"}}) {
    TESSERA_CHECK_ARG(t->ndim() == 3, what, " = ", t->to_string(), ": expected 3 dims [T, H, D]");
    TESSERA_CHECK_ARG(t->size(2) == 1 || t->stride(2) == 1, what, " = ", t->to_string(),
                      " has stride ", t->stride(2), " in D: expected 1");
    TESSERA_CHECK_ARG(is_float(t->dtype()), what, " has dtype ", dtype_name(t->dtype()),
                      ": expected bf16, f16 or f32");
    check_has_data(*t, what);
    check_on_stream(*t, stream, what);
  }
  check_shape(out, x, "out", "x");
  check_same_dtype(out, x, "out", "x");
  check_no_partial_overlap(out, x, "out", "x");
  check_index_vector(positions, x.size(0), stream, "positions");
  TESSERA_CHECK_ARG(inv_freq.ndim() == 1 && inv_freq.size(0) >= 1 &&
                        2 * inv_freq.size(0) <= x.size(2) && inv_freq.dtype() == DType::kF32,
                    "inv_freq = ", inv_freq.to_string(),
                    ": expected f32[R/2] with 2 <= R <= D = ", x.size(2),
                    " (the rotated dims; rope_inv_freq() makes it)");
  check_has_data(inv_freq, "inv_freq");
  check_on_stream(inv_freq, stream, "inv_freq");
  if (x.numel() == 0) return;
  if (on_cpu(stream)) {
    check_index_range(positions, int64_t{1} << 31, "positions", "a position below 2^31");
    return detail::reference_rope(x, positions, inv_freq, out);
  }
#ifdef TESSERA_WITH_CUDA
  detail::cuda_rope(x, positions, inv_freq, out, stream);
#endif
}

void silu_and_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
                  const Stream& stream) {
  check_rows(gate, stream, "gate");
  check_rows(up, stream, "up");
  check_rows(out, stream, "out");
  check_shape(up, gate, "up", "gate");
  check_shape(out, gate, "out", "gate");
  check_same_dtype(up, gate, "up", "gate");
  check_same_dtype(out, gate, "out", "gate");
  check_no_partial_overlap(out, gate, "out", "gate");
  check_no_partial_overlap(out, up, "out", "up");
  if (gate.size(0) == 0) return;
  if (on_cpu(stream)) return detail::reference_silu_and_mul(gate, up, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_silu_and_mul(gate, up, out, stream);
#endif
}

void gelu_tanh(const TensorView& x, const TensorView& out, const Stream& stream) {
  check_elementwise(x, out, stream);
  if (x.size(0) == 0) return;
  if (on_cpu(stream)) return detail::reference_gelu_tanh(x, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_gelu_tanh(x, out, stream);
#endif
}

void adaln_modulate(const TensorView& x, const TensorView& shift, const TensorView& scale,
                    const TensorView& out, const Stream& stream) {
  for (auto [t, what] : {std::pair{&x, "x"}, std::pair{&out, "out"}}) check_tokens(*t, stream, what);
  check_shape(out, x, "out", "x");
  check_same_dtype(out, x, "out", "x");
  check_no_partial_overlap(out, x, "out", "x");
  check_per_batch(shift, x, out, stream, "shift");
  check_per_batch(scale, x, out, stream, "scale");
  if (x.numel() == 0) return;
  if (on_cpu(stream)) return detail::reference_adaln_modulate(x, shift, scale, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_adaln_modulate(x, shift, scale, out, stream);
#endif
}

void gated_add(const TensorView& x, const TensorView& y, const TensorView& gate,
               const TensorView& out, const Stream& stream) {
  for (auto [t, what] : {std::pair{&x, "x"}, std::pair{&y, "y"}, std::pair{&out, "out"}})
    check_tokens(*t, stream, what);
  check_shape(y, x, "y", "x");
  check_shape(out, x, "out", "x");
  check_same_dtype(y, x, "y", "x");
  check_same_dtype(out, x, "out", "x");
  check_no_partial_overlap(out, x, "out", "x");
  check_no_partial_overlap(out, y, "out", "y");
  check_per_batch(gate, x, out, stream, "gate");
  if (x.numel() == 0) return;
  if (on_cpu(stream)) return detail::reference_gated_add(x, y, gate, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_gated_add(x, y, gate, out, stream);
#endif
}

void silu(const TensorView& x, const TensorView& out, const Stream& stream) {
  check_elementwise(x, out, stream);
  if (x.size(0) == 0) return;
  if (on_cpu(stream)) return detail::reference_silu(x, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_silu(x, out, stream);
#endif
}

void head_rms_norm_rotary(const TensorView& x, const TensorView& weight, float eps,
                          const TensorView& cos, const TensorView& sin, const TensorView& out,
                          const Stream& stream) {
  for (auto [t, what] : {std::pair{&x, "x"}, std::pair{&out, "out"}}) {
    TESSERA_CHECK_ARG(t->ndim() == 3, what, " = ", t->to_string(), ": expected 3 dims [T, H, D]");
    TESSERA_CHECK_ARG(t->size(2) == 1 || t->stride(2) == 1, what, " = ", t->to_string(),
                      " has stride ", t->stride(2), " in D: expected 1");
    TESSERA_CHECK_ARG(is_float(t->dtype()), what, " has dtype ", dtype_name(t->dtype()),
                      ": expected bf16, f16 or f32");
    check_has_data(*t, what);
    check_on_stream(*t, stream, what);
  }
  const int64_t d = x.size(2);
  TESSERA_CHECK_ARG(d >= 2 && d % 2 == 0 && d <= 4096, "x = ", x.to_string(),
                    ": expected an even head dimension D from 2 to 4096");
  check_shape(out, x, "out", "x");
  check_same_dtype(out, x, "out", "x");
  check_no_partial_overlap(out, x, "out", "x");
  check_vector(weight, d, x, stream, "weight");
  check_eps(eps);
  TESSERA_CHECK_ARG(cos.empty() == sin.empty(), cos.empty() ? "cos" : "sin",
                    " is empty but the other table is not: expected both (RoPE) or neither");
  if (!cos.empty()) {
    for (auto [t, what] : {std::pair{&cos, "cos"}, std::pair{&sin, "sin"}}) {
      check_rows(*t, stream, what);
      TESSERA_CHECK_ARG(t->dtype() == DType::kF32 && t->size(0) == x.size(0) && t->size(1) == d,
                        what, " = ", t->to_string(), ": expected f32[", x.size(0), ", ", d,
                        "] [T, D] of x");
      check_no_partial_overlap(out, *t, "out", what);
    }
  }
  if (x.numel() == 0) return;
  if (on_cpu(stream)) return detail::reference_head_rms_norm_rotary(x, weight, eps, cos, sin, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_head_rms_norm_rotary(x, weight, eps, cos, sin, out, stream);
#endif
}

void embedding(const TensorView& ids, const TensorView& table, const TensorView& out,
               const Stream& stream) {
  check_rows(table, stream, "table");
  check_rows(out, stream, "out");
  check_index_vector(ids, out.size(0), stream, "ids");
  TESSERA_CHECK_ARG(table.size(0) >= 1, "table = ", table.to_string(), ": expected V >= 1 rows");
  TESSERA_CHECK_ARG(out.size(1) == table.size(1), "out = ", out.to_string(), ": expected [",
                    ids.size(0), ", ", table.size(1), "] [N, C of table]");
  check_same_dtype(out, table, "out", "table");
  check_no_partial_overlap(out, table, "out", "table");
  if (out.size(0) == 0) return;
  if (on_cpu(stream)) {
    check_index_range(ids, table.size(0), "ids", "the table's rows");
    return detail::reference_embedding(ids, table, out);
  }
#ifdef TESSERA_WITH_CUDA
  detail::cuda_embedding(ids, table, out, stream);
#endif
}

void scatter_rows(const TensorView& src, const TensorView& ids, const TensorView& table,
                  const Stream& stream) {
  check_rows(src, stream, "src");
  check_rows(table, stream, "table");
  check_index_vector(ids, src.size(0), stream, "ids");
  TESSERA_CHECK_ARG(table.size(1) == src.size(1), "table = ", table.to_string(),
                    ": expected [R, ", src.size(1), "] [R, C of src]");
  check_same_dtype(table, src, "table", "src");
  check_no_partial_overlap(table, src, "table", "src");
  TESSERA_CHECK_ARG(table.data() != src.data() || src.size(0) == 0, "scatter_rows: table and src "
                    "are the same memory: expected separate tensors");
  if (src.size(0) == 0) return;
  if (on_cpu(stream)) {
    check_index_range(ids, table.size(0), "ids", "the table's rows");
    return detail::reference_scatter_rows(src, ids, table);
  }
#ifdef TESSERA_WITH_CUDA
  detail::cuda_scatter_rows(src, ids, table, stream);
#endif
}

void argmax(const TensorView& logits, const TensorView& out, const Stream& stream) {
  check_rows(logits, stream, "logits");
  check_index_vector(out, logits.size(0), stream, "out");
  TESSERA_CHECK_ARG(out.dtype() == DType::kI64 || logits.size(1) <= INT32_MAX, "out has dtype i32 ",
                    "but logits = ", logits.to_string(),
                    " has more than 2^31 - 1 entries per row: ", "expected i64");
  if (logits.size(0) == 0) return;
  if (on_cpu(stream)) return detail::reference_argmax(logits, out);
#ifdef TESSERA_WITH_CUDA
  detail::cuda_argmax(logits, out, stream);
#endif
}

}  // namespace tessera::model
