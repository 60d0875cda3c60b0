// The varlen attention reference (varlen.h): validate the packed tensors and cu_seqlens, then
// run each sequence as a one-sequence batch through reference_attention, with the causal mask
// aligned bottom-right, and scatter its rows into the packed result.
#include "tessera/attn/varlen.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attn/arg_checks.h"
#include "attn/varlen_checks.h"
#include "tessera/core/error.h"

namespace tessera::attn {

namespace {

bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

void check_packed(const TensorView& t, const char* what) {
  TESSERA_CHECK_ARG(t.device().kind == DeviceKind::kCpu, what, " = ", t.to_string(), " is on ",
                    t.device().to_string(), ": expected cpu");
  TESSERA_CHECK_ARG(t.ndim() == 3, what, " = ", t.to_string(), ": expected [total, H, D]");
  TESSERA_CHECK_ARG(is_float_dtype(t.dtype()), what, " has dtype ", dtype_name(t.dtype()),
                    ": expected f32, bf16 or f16");
  TESSERA_CHECK_ARG(t.size(2) <= 1 || t.stride(2) == 1, what, " = ", t.to_string(), " has stride ",
                    t.stride(2), " in D: expected 1");
}

// cu [B + 1] i32: cu[0] = 0, non-decreasing, cu[B] = total, every length <= max_seqlen.
// Returns the entries.
std::vector<int64_t> read_cu_seqlens(const TensorView& cu, int64_t total, int64_t max_seqlen,
                                     const char* what, const char* total_what,
                                     const char* max_what) {
  TESSERA_CHECK_ARG(cu.device().kind == DeviceKind::kCpu && cu.dtype() == DType::kI32 &&
                        cu.ndim() == 1 && cu.size(0) >= 1,
                    what, " = ", cu.to_string(), ": expected cpu i32[B + 1]");
  std::vector<int64_t> out(size_t(cu.size(0)));
  for (int64_t b = 0; b < cu.size(0); ++b) {
    out[size_t(b)] = cu.data_as<const int32_t>()[b * cu.stride(0)];
    if (b == 0) {
      TESSERA_CHECK_ARG(out[0] == 0, what, "[0] = ", out[0], ": expected 0");
    } else {
      const int64_t len = out[size_t(b)] - out[size_t(b - 1)];
      TESSERA_CHECK_ARG(len >= 0, what, "[", b, "] = ", out[size_t(b)], ": expected >= ", what, "[",
                        b - 1, "] = ", out[size_t(b - 1)], " (non-decreasing)");
      TESSERA_CHECK_ARG(out[size_t(b)] <= total, what, "[", b, "] = ", out[size_t(b)],
                        ": expected <= ", total, " (", total_what, ")");
      TESSERA_CHECK_ARG(len <= max_seqlen, what, "[", b, "] - ", what, "[", b - 1, "] = ", len,
                        ": expected <= ", max_what, " = ", max_seqlen);
    }
  }
  const int64_t last = cu.size(0) - 1;
  TESSERA_CHECK_ARG(out[size_t(last)] == total, what, "[", last, "] = ", out[size_t(last)],
                    ": expected ", total, " (", total_what, ")");
  return out;
}

}  // namespace

TensorView packed_rows(const TensorView& packed, int64_t start, int64_t len) {
  const TensorView s = packed.slice(0, start, len);
  return TensorView(s.data(), s.dtype(), s.device(), {1, len, packed.size(1), packed.size(2)},
                    {std::max<int64_t>(len, 1) * packed.stride(0), packed.stride(0),
                     packed.stride(1), packed.stride(2)});
}

namespace detail {
void check_packed_operands(const TensorView& q, const TensorView& k, const TensorView& v) {
  TESSERA_CHECK_ARG(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "k / v have dtypes ",
                    dtype_name(k.dtype()), " / ", dtype_name(v.dtype()), ": expected ",
                    dtype_name(q.dtype()), " (q's)");
  TESSERA_CHECK_ARG(v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2),
                    "v = ", v.to_string(), ": expected the shape of k = ", k.to_string());
  TESSERA_CHECK_ARG(k.size(2) == q.size(2), "k = ", k.to_string(), " has head dim ", k.size(2),
                    ": expected ", q.size(2), " (q's)");
  TESSERA_CHECK_ARG(k.size(1) >= 1 && q.size(1) % k.size(1) == 0, "k = ", k.to_string(), " has ",
                    k.size(1), " heads: expected a divisor of q's ", q.size(1));
}
}  // namespace detail

VarlenReferenceResult reference_attention_varlen(
    const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& cu_seqlens_q,
    const TensorView& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal,
    float softmax_scale, ReferencePrecision precision) {
  detail::check_softmax_scale(softmax_scale);
  check_packed(q, "q");
  check_packed(k, "k");
  check_packed(v, "v");
  detail::check_packed_operands(q, k, v);
  TESSERA_CHECK_ARG(max_seqlen_q >= 0, "max_seqlen_q = ", max_seqlen_q, ": expected >= 0");
  TESSERA_CHECK_ARG(max_seqlen_k >= 0, "max_seqlen_k = ", max_seqlen_k, ": expected >= 0");
  const std::vector<int64_t> cu_q = read_cu_seqlens(
      cu_seqlens_q, q.size(0), max_seqlen_q, "cu_seqlens_q", "total_q = q.size(0)", "max_seqlen_q");
  const std::vector<int64_t> cu_k = read_cu_seqlens(
      cu_seqlens_k, k.size(0), max_seqlen_k, "cu_seqlens_k", "total_k = k.size(0)", "max_seqlen_k");
  TESSERA_CHECK_ARG(cu_q.size() == cu_k.size(), "cu_seqlens_k has ", cu_k.size(),
                    " entries: expected ", cu_q.size(), " like cu_seqlens_q (B + 1)");

  VarlenReferenceResult r;
  r.total_q = q.size(0);
  r.heads = q.size(1);
  r.head_dim = q.size(2);
  r.o.assign(size_t(r.total_q * r.heads * r.head_dim), 0.0f);
  r.lse.assign(size_t(r.heads * r.total_q), -std::numeric_limits<float>::infinity());
  for (size_t b = 0; b + 1 < cu_q.size(); ++b) {
    const int64_t q0 = cu_q[b], lq = cu_q[b + 1] - q0;
    const int64_t k0 = cu_k[b], lk = cu_k[b + 1] - k0;
    if (lq == 0) continue;
    const MaskSpec mask = causal ? MaskSpec::causal_at(lk - lq, 0) : MaskSpec::none();
    const KvChunk chunk{packed_rows(k, k0, lk), packed_rows(v, k0, lk), mask};
    const ReferenceResult s = reference_attention(
        packed_rows(q, q0, lq), std::span<const KvChunk>(&chunk, 1), softmax_scale, precision);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t h = 0; h < r.heads; ++h) {
        for (int64_t d = 0; d < r.head_dim; ++d)
          r.o[size_t(((q0 + i) * r.heads + h) * r.head_dim + d)] = s.o_at(0, i, h, d);
        r.lse[size_t(h * r.total_q + q0 + i)] = s.lse_at(0, h, i);
      }
  }
  return r;
}

}  // namespace tessera::attn
