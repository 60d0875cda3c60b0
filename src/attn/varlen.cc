// forward_varlen (varlen.h): validate the packed tensors and cu_seqlens for the stream's
// backend, then run the reference (cpu) or hand the packed tensors, viewed as one batch, to the
// cuda attention kernel.
#include <cmath>
#include <utility>

#include "attn/arg_checks.h"
#include "attn/attention_backend.h"
#include "attn/varlen_checks.h"
#include "tessera/attn/varlen.h"
#include "tessera/core/error.h"

namespace tessera::attn {

namespace {

// [total, H, D] with unit stride in D, on the stream's device.
void check_packed_on(const TensorView& t, const Stream& stream, const char* what) {
  TESSERA_CHECK_ARG(t.ndim() == 3, what, " = ", t.to_string(), ": expected [total, H, D]");
  TESSERA_CHECK_ARG(t.size(2) <= 1 || t.stride(2) == 1, what, " = ", t.to_string(), " has stride ",
                    t.stride(2), " in D: expected 1");
  detail::check_on_stream(t, stream, what);
}

// i32 [B + 1], unit stride, on the stream's device.
void check_cu_seqlens_on(const TensorView& cu, const Stream& stream, const char* what) {
  TESSERA_CHECK_ARG(cu.dtype() == DType::kI32 && cu.ndim() == 1 && cu.size(0) >= 1 &&
                        (cu.size(0) == 1 || cu.stride(0) == 1),
                    what, " = ", cu.to_string(), ": expected contiguous i32[B + 1]");
  detail::check_on_stream(cu, stream, what);
}


}  // namespace

void forward_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                    int64_t max_seqlen_q, int64_t max_seqlen_k, bool causal, float softmax_scale,
                    const TensorView& o, const TensorView& lse, const Stream& stream) {
  for (const auto& [t, name] : {std::pair{q, "q"}, std::pair{k, "k"}, std::pair{v, "v"},
                                std::pair{o, "o"}})
    check_packed_on(t, stream, name);
  check_cu_seqlens_on(cu_seqlens_q, stream, "cu_seqlens_q");
  check_cu_seqlens_on(cu_seqlens_k, stream, "cu_seqlens_k");
  TESSERA_CHECK_ARG(o.size(0) == q.size(0) && o.size(1) == q.size(1) && o.size(2) == q.size(2),
                    "o = ", o.to_string(), ": expected the shape of q = ", q.to_string());
  TESSERA_CHECK_ARG(o.dtype() == q.dtype(), "o has dtype ", dtype_name(o.dtype()), ": expected ",
                    dtype_name(q.dtype()), " (q's)");
  if (!lse.empty()) {
    TESSERA_CHECK_ARG(lse.ndim() == 2 && lse.size(0) == q.size(1) && lse.size(1) == q.size(0),
                      "lse = ", lse.to_string(), ": expected f32[", q.size(1), ", ", q.size(0),
                      "] [Hq, total_q]");
    check_dtype(lse, DType::kF32, "lse");
    detail::check_on_stream(lse, stream, "lse");
  }

  if (stream.backend() == Backend::kCpu) {
    // The reference checks the rest (dtypes, heads, cu_seqlens' values, max_seqlen).
    const VarlenReferenceResult r =
        reference_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                   max_seqlen_k, causal, softmax_scale);
    for (int64_t t = 0; t < r.total_q; ++t)
      for (int64_t h = 0; h < r.heads; ++h) {
        const int64_t base = t * o.stride(0) + h * o.stride(1);
        for (int64_t d = 0; d < r.head_dim; ++d)
          store_from_float(o.data(), o.dtype(), base + d, r.o_at(t, h, d));
        if (!lse.empty()) lse.data_as<float>()[h * lse.stride(0) + t * lse.stride(1)] = r.lse_at(h, t);
      }
    return;
  }
#ifdef TESSERA_WITH_CUDA
  detail::check_softmax_scale(softmax_scale);
  detail::check_packed_operands(q, k, v);
  TESSERA_CHECK_ARG(cu_seqlens_k.size(0) == cu_seqlens_q.size(0), "cu_seqlens_k has ",
                    cu_seqlens_k.size(0), " entries: expected ", cu_seqlens_q.size(0),
                    " like cu_seqlens_q (B + 1)");
  TESSERA_CHECK_ARG(max_seqlen_q >= 0 && max_seqlen_k >= 0, "max_seqlen_q = ", max_seqlen_q,
                    ", max_seqlen_k = ", max_seqlen_k, ": expected both >= 0");
  TESSERA_CHECK_ARG(q.size(0) < (int64_t(1) << 31) && k.size(0) < (int64_t(1) << 31),
                    "q = ", q.to_string(), ", k = ", k.to_string(),
                    ": expected fewer than 2^31 tokens (cu_seqlens are i32)");
  const TensorView q4 = packed_rows(q, 0, q.size(0)), k4 = packed_rows(k, 0, k.size(0)),
                   v4 = packed_rows(v, 0, v.size(0)), o4 = packed_rows(o, 0, o.size(0));
  for (const auto& [t, name] : {std::pair{q4, "q"}, std::pair{k4, "k"}, std::pair{v4, "v"}})
    detail::cuda_check_supported(t, name, true);
  detail::cuda_check_supported(o4, "o", false);
  const TensorView lse3 =
      lse.empty() ? TensorView()
                  : TensorView(lse.data(), DType::kF32, lse.device(), {1, lse.size(0), lse.size(1)},
                               {lse.size(0) * lse.stride(0), lse.stride(0), lse.stride(1)});
  detail::cuda_attention_varlen(q4, k4, v4, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal,
                                softmax_scale, o4, lse3, stream);
#else
  (void)max_seqlen_k;
  throw_error(ErrorCode::kUnsupported,
              "attn::forward_varlen: a cuda stream, but this build has no cuda backend");
#endif
}

}  // namespace tessera::attn
