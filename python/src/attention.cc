// tessera.attention, tessera.attention_varlen and tessera.reference_attention: local attention
// (attn/attention.h, attn/varlen.h) on arrays from any DLPack producer. q [B, Lq, Hq, D], k and
// v [B, Lkv, Hkv, D], Hq % Hkv == 0; causal masking by positions q_start + i and kv_start + j.
// Varlen: sequences packed along one token axis, q [total_q, Hq, D], k and v [total_k, Hkv, D],
// int32 cu_seqlens [B + 1]. The cpu backend runs the float32 reference; cuda arrays run the
// Hopper kernels on the given stream handle (out required).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>

#include <cmath>
#include <optional>

#include "arrays.h"
#include "attention_operands.h"
#include "bindings.h"
#include "tessera/attn/attention.h"
#include "tessera/attn/reference.h"
#include "tessera/attn/varlen.h"
#include "tessera/core/error.h"

namespace nb = nanobind;

namespace tessera::python {

Operands attention_operands(TensorView q, TensorView k, TensorView v, bool causal,
                            std::optional<double> softmax_scale, int64_t q_start,
                            int64_t kv_start) {
  check_same_device(k, "k", q, "q");
  check_same_device(v, "v", q, "q");
  const int64_t B = q.size(0), Hq = q.size(2), D = q.size(3);
  const int64_t Lkv = k.size(1), Hkv = k.size(2);
  TESSERA_CHECK_ARG(k.size(0) == B && k.size(3) == D, "k: shape ", shape_string(k),
                    ": expected [B=", B, ", Lkv, Hkv, D=", D, "] (B and D of q ", shape_string(q),
                    ")");
  TESSERA_CHECK_ARG(Hkv >= 1 && Hq % Hkv == 0, "k: ", Hkv, " heads: expected a divisor of q's ", Hq,
                    " heads (GQA groups)");
  check_shape(v, "v", {B, Lkv, Hkv, D}, str("k's shape ", shape_string(k)));
  Operands ops{q, k, v, attn::MaskSpec::none(), 1.0f};
  ops.softmax_scale = softmax_scale ? float(*softmax_scale) : attn::default_softmax_scale(D);
  TESSERA_CHECK_ARG(std::isfinite(ops.softmax_scale) && ops.softmax_scale > 0,
                    "softmax_scale = ", ops.softmax_scale, ": expected a finite value > 0");
  if (causal) ops.mask = attn::MaskSpec::causal_at(q_start, kv_start);
  return ops;
}

namespace {

constexpr ArgSpec kQ{"q", "[B, Lq, Hq, D]", 4};
constexpr ArgSpec kK{"k", "[B, Lkv, Hkv, D]", 4};
constexpr ArgSpec kV{"v", "[B, Lkv, Hkv, D]", 4};
constexpr ArgSpec kOut{"out", "[B, Lq, Hq, D]", 4, true};

Operands operands(const InArray& q_arr, const InArray& k_arr, const InArray& v_arr, bool causal,
                  std::optional<double> softmax_scale, int64_t q_start, int64_t kv_start) {
  Operands ops =
      attention_operands(checked_view(q_arr, kQ), checked_view(k_arr, kK), checked_view(v_arr, kV),
                         causal, softmax_scale, q_start, kv_start);
  TESSERA_CHECK_ARG(ops.k.dtype() == ops.q.dtype() && ops.v.dtype() == ops.q.dtype(),
                    "k, v: dtypes ", dtype_name(ops.k.dtype()), ", ", dtype_name(ops.v.dtype()),
                    ": expected q's ", dtype_name(ops.q.dtype()));
  return ops;
}

nb::object attention(const InArray& q_arr, const InArray& k_arr, const InArray& v_arr, bool causal,
                     std::optional<double> softmax_scale, int64_t q_start, int64_t kv_start,
                     nb::object out, bool return_lse, uint64_t stream_handle) {
  const Operands ops = operands(q_arr, k_arr, v_arr, causal, softmax_scale, q_start, kv_start);
  const TensorView& q = ops.q;
  const std::vector<int64_t> o_shape = {q.size(0), q.size(1), q.size(2), q.size(3)};
  const Output o = output_argument(out, kOut, q, "q", o_shape, q.dtype(),
                                   str("q's shape ", shape_string(q)), "q's");
  NumpyArray lse_arr;
  TensorView lse;
  if (return_lse) {
    TESSERA_CHECK_ARG(!q.device().is_cuda(), "return_lse: True with q on ", q.device().to_string(),
                      ": expected False (cpu only for now)");
    lse_arr = new_numpy_array(DType::kF32, {q.size(0), q.size(2), q.size(1)});
    lse = view_of(lse_arr, DType::kF32);
  }
  const Stream stream = stream_for(stream_handle, q.device());
  {
    nb::gil_scoped_release released;  // other Python threads (ranks) run meanwhile
    attn::forward(q, ops.k, ops.v, o.view, lse, ops.mask, ops.softmax_scale, stream);
  }
  if (return_lse) return nb::make_tuple(o.object, nb::cast(lse_arr));
  return o.object;
}

std::pair<NumpyArray, NumpyArray> reference_attention(const InArray& q_arr, const InArray& k_arr,
                                                      const InArray& v_arr, bool causal,
                                                      std::optional<double> softmax_scale,
                                                      int64_t q_start, int64_t kv_start) {
  const Operands ops = operands(q_arr, k_arr, v_arr, causal, softmax_scale, q_start, kv_start);
  TESSERA_CHECK_ARG(!ops.q.device().is_cuda(), "q: on ", ops.q.device().to_string(),
                    ": expected cpu arrays (the reference runs on the host)");
  const attn::KvChunk chunk{ops.k, ops.v, ops.mask};
  attn::ReferenceResult ref;
  {
    nb::gil_scoped_release released;
    ref = attn::reference_attention(ops.q, std::span<const attn::KvChunk>(&chunk, 1),
                                    ops.softmax_scale);
  }
  NumpyArray o = new_numpy_array(DType::kF32, {ref.batch, ref.lq, ref.heads, ref.head_dim});
  NumpyArray lse = new_numpy_array(DType::kF32, {ref.batch, ref.heads, ref.lq});
  std::copy(ref.o.begin(), ref.o.end(), static_cast<float*>(o.data()));
  std::copy(ref.lse.begin(), ref.lse.end(), static_cast<float*>(lse.data()));
  return {o, lse};
}

constexpr ArgSpec kPackedQ{"q", "[total_q, Hq, D]", 3};
constexpr ArgSpec kPackedK{"k", "[total_k, Hkv, D]", 3};
constexpr ArgSpec kPackedV{"v", "[total_k, Hkv, D]", 3};
constexpr ArgSpec kCuSeqlensQ{"cu_seqlens_q", "[B + 1]", 1};
constexpr ArgSpec kCuSeqlensK{"cu_seqlens_k", "[B + 1]", 1};
constexpr ArgSpec kPackedOut{"out", "[total_q, Hq, D]", 3, true};

nb::object attention_varlen(const InArray& q_arr, const InArray& k_arr, const InArray& v_arr,
                            const InArray& cu_q_arr, const InArray& cu_k_arr, int64_t max_seqlen_q,
                            int64_t max_seqlen_k, bool causal, std::optional<double> softmax_scale,
                            nb::object out, bool return_lse, uint64_t stream_handle) {
  const TensorView q = checked_view(q_arr, kPackedQ), k = checked_view(k_arr, kPackedK),
                   v = checked_view(v_arr, kPackedV);
  const TensorView cu_q = index_view(cu_q_arr, kCuSeqlensQ), cu_k = index_view(cu_k_arr, kCuSeqlensK);
  for (const auto& [t, name] : {std::pair{k, "k"}, std::pair{v, "v"}, std::pair{cu_q, "cu_seqlens_q"},
                                std::pair{cu_k, "cu_seqlens_k"}})
    check_same_device(t, name, q, "q");
  const float scale = softmax_scale ? float(*softmax_scale) : attn::default_softmax_scale(q.size(2));
  const Output o = output_argument(out, kPackedOut, q, "q", {q.size(0), q.size(1), q.size(2)},
                                   q.dtype(), str("q's shape ", shape_string(q)), "q's");
  NumpyArray lse_arr;
  TensorView lse;
  if (return_lse) {
    TESSERA_CHECK_ARG(!q.device().is_cuda(), "return_lse: True with q on ", q.device().to_string(),
                      ": expected False (cpu only for now)");
    lse_arr = new_numpy_array(DType::kF32, {q.size(1), q.size(0)});
    lse = view_of(lse_arr, DType::kF32);
  }
  const Stream stream = stream_for(stream_handle, q.device());
  {
    nb::gil_scoped_release released;
    attn::forward_varlen(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal, scale, o.view,
                         lse, stream);
  }
  if (return_lse) return nb::make_tuple(o.object, nb::cast(lse_arr));
  return o.object;
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("attention", attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::kw_only(),
        nb::arg("causal") = false, nb::arg("softmax_scale") = nb::none(), nb::arg("q_start") = 0,
        nb::arg("kv_start") = 0, nb::arg("out") = nb::none(), nb::arg("return_lse") = false,
        nb::arg("stream") = 0,
        "Local attention o = softmax(scale * q k^T) v.\n\n"
        "q [B, Lq, Hq, D], k and v [B, Lkv, Hkv, D] with Hq % Hkv == 0 (GQA); float32, float16 "
        "or bfloat16 (NumPy: uint16 bit patterns); unit stride in D, any other strides. "
        "causal masks key position kv_start + j > query position q_start + i. Returns out "
        "(when None: a new array of q's dtype, NumPy on the cpu, from q's framework on a GPU), "
        "and with return_lse also the float32 log-sum-exp [B, Hq, Lq] (cpu only). stream: a "
        "cudaStream_t as an int for cuda arrays (None: the current stream of q's framework, "
        "torch or CuPy), 0 on cpu.");
  m.def("attention_varlen", attention_varlen, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("cu_seqlens_q"), nb::arg("cu_seqlens_k"), nb::arg("max_seqlen_q"),
        nb::arg("max_seqlen_k"), nb::kw_only(), nb::arg("causal") = false,
        nb::arg("softmax_scale") = nb::none(), nb::arg("out") = nb::none(),
        nb::arg("return_lse") = false, nb::arg("stream") = 0,
        "Attention of B sequences of different lengths packed along one token axis "
        "(FlashAttention's varlen API).\n\n"
        "q [total_q, Hq, D], k and v [total_k, Hkv, D]; sequence b owns rows cu_seqlens_q[b] .. "
        "cu_seqlens_q[b + 1] of q and cu_seqlens_k[b] .. cu_seqlens_k[b + 1] of k and v (int32 "
        "[B + 1], on q's device) and attends within itself; max_seqlen_q / max_seqlen_k bound "
        "the lengths. causal aligns bottom-right (query i sees key j when j <= i + Lk - Lq). "
        "dtypes, out, stream as in attention; with return_lse also the float32 log-sum-exp "
        "[Hq, total_q] (cpu only). On a GPU the kernel reads cu_seqlens on the device: their "
        "values are not checked (out-of-range entries are clamped, rows past max_seqlen_q come "
        "out NaN), and k, v must be finite everywhere.");
  m.def("reference_attention", reference_attention, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::kw_only(), nb::arg("causal") = false, nb::arg("softmax_scale") = nb::none(),
        nb::arg("q_start") = 0, nb::arg("kv_start") = 0,
        "Tessera's float32 reference attention on cpu arrays (what the kernels are checked "
        "against): returns (o float32 [B, Lq, Hq, D], lse float32 [B, Hq, Lq]).");
}

}  // namespace tessera::python
