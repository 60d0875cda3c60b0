// tessera.attention_fp8 and tessera.quantize_fp8: FP8 (e4m3) attention with per-head descales
// (attn/fp8.h) on arrays from any DLPack producer. q8 [B, Lq, Hq, D], k8 and v8 [B, Lkv, Hkv, D]
// as float8_e4m3fn or uint8 bit patterns (NumPy), descales float32 [Hq], [Hkv], [Hkv] on the
// same device. The cpu backend runs the reference (dequantized float32); cuda arrays run the
// sm90 FP8 kernel (out bf16, D 128 or 256) with a workspace the caller's framework allocates
// (fp8_workspace_bytes), so a call allocates nothing and can be captured in a graph.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <vector>

#include "arrays.h"
#include "attention_operands.h"
#include "bindings.h"
#include "tessera/attn/fp8.h"
#include "tessera/core/error.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

constexpr ArgSpec kQ8{"q", "[B, Lq, Hq, D]", 4};
constexpr ArgSpec kK8{"k", "[B, Lkv, Hkv, D]", 4};
constexpr ArgSpec kV8{"v", "[B, Lkv, Hkv, D]", 4};
constexpr ArgSpec kOut{"out", "[B, Lq, Hq, D]", 4, true};
constexpr ArgSpec kX{"x", "[B, L, H, D]", 4};

// A float32 [heads] descale vector on `like`'s device.
TensorView descale_view(const InArray& arr, const char* name, int64_t heads,
                        const TensorView& like) {
  const ArgSpec spec{name, "[heads]", 1};
  const TensorView t = checked_view(arr, spec);
  check_same_device(t, name, like, "q");
  TESSERA_CHECK_ARG(t.dtype() == DType::kF32, name, ": dtype ", dtype_name(t.dtype()),
                    ": expected float32 (one descale per head)");
  TESSERA_CHECK_ARG(t.size(0) == heads, name, ": ", t.size(0), " values: expected ", heads,
                    " (one per head)");
  return t;
}

nb::object attention_fp8(const InArray& q_arr, const InArray& k_arr, const InArray& v_arr,
                         const InArray& dq_arr, const InArray& dk_arr, const InArray& dv_arr,
                         bool causal, std::optional<double> softmax_scale, int64_t q_start,
                         int64_t kv_start, nb::object out, const nb::handle& out_dtype,
                         nb::object workspace, bool return_lse, uint64_t stream_handle) {
  const Operands ops =
      attention_operands(fp8_view(q_arr, kQ8), fp8_view(k_arr, kK8), fp8_view(v_arr, kV8), causal,
                         softmax_scale, q_start, kv_start);
  const TensorView& q = ops.q;
  const int64_t B = q.size(0), Hq = q.size(2), D = q.size(3), Hkv = ops.k.size(2);
  const attn::Fp8DescaleTensors descales{descale_view(dq_arr, "descale_q", Hq, q),
                                         descale_view(dk_arr, "descale_k", Hkv, q),
                                         descale_view(dv_arr, "descale_v", Hkv, q)};
  const Output o = output_argument(out, kOut, q, "q", {B, q.size(1), Hq, D},
                                   dtype_argument(out_dtype, "out_dtype"),
                                   str("q's shape ", shape_string(q)), "out_dtype");
  NumpyArray lse_arr;
  TensorView lse;
  if (return_lse) {
    TESSERA_CHECK_ARG(!q.device().is_cuda(), "return_lse: True with q on ", q.device().to_string(),
                      ": expected False (cpu only for now)");
    lse_arr = new_numpy_array(DType::kF32, {B, Hq, q.size(1)});
    lse = view_of(lse_arr, DType::kF32);
  }
  const Stream stream = stream_for(stream_handle, q.device());
  TensorView scratch;
  if (!workspace.is_none()) {
    scratch = bytes_view(array_argument<OutArray>(workspace, "workspace"), "workspace");
    check_same_device(scratch, "workspace", q, "q");
  }
  {
    nb::gil_scoped_release released;
    attn::forward_fp8(q, ops.k, ops.v, descales, ops.mask, ops.softmax_scale, o.view, lse, scratch,
                      stream);
  }
  if (return_lse) return nb::make_tuple(o.object, nb::cast(lse_arr));
  return o.object;
}

int64_t fp8_workspace_bytes(const InArray& v_arr, uint64_t stream_handle) {
  const TensorView v = fp8_view(v_arr, kV8);
  return attn::fp8_workspace_bytes(v, stream_for(stream_handle, v.device()));
}

std::pair<NumpyArray, NumpyArray> quantize_fp8(const InArray& x_arr) {
  const TensorView x = checked_view(x_arr, kX);
  TESSERA_CHECK_ARG(!x.device().is_cuda(), "x: on ", x.device().to_string(),
                    ": expected a cpu array (quantize on the GPU with its framework, as "
                    "TransformerEngine does, and pass the descales)");
  NumpyArray x8 = new_numpy_array(DType::kFP8E4M3, {x.size(0), x.size(1), x.size(2), x.size(3)});
  NumpyArray descales = new_numpy_array(DType::kF32, {x.size(2)});
  {
    nb::gil_scoped_release released;
    const std::vector<float> d = attn::fp8_head_descales(x);
    std::copy(d.begin(), d.end(), static_cast<float*>(descales.data()));
    attn::quantize_fp8_per_head(x, d, view_of(x8, DType::kFP8E4M3));
  }
  return {x8, descales};
}

}  // namespace

void bind_attention_fp8(nb::module_& m) {
  m.def("attention_fp8", attention_fp8, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("descale_q"), nb::arg("descale_k"), nb::arg("descale_v"), nb::kw_only(),
        nb::arg("causal") = false, nb::arg("softmax_scale") = nb::none(), nb::arg("q_start") = 0,
        nb::arg("kv_start") = 0, nb::arg("out") = nb::none(), nb::arg("out_dtype") = "bfloat16",
        nb::arg("workspace") = nb::none(), nb::arg("return_lse") = false, nb::arg("stream") = 0,
        "FP8 (e4m3) attention with per-head descales: o = softmax(scale * descale_q * "
        "descale_k * q k^T) (v * descale_v).\n\n"
        "q [B, Lq, Hq, D], k and v [B, Lkv, Hkv, D] as float8_e4m3fn (torch) or uint8 bit "
        "patterns (NumPy), Hq % Hkv == 0; descale_q [Hq], descale_k and descale_v [Hkv] float32 "
        "on the same device (quantize_fp8's, or TransformerEngine's scale_inv per head). causal "
        "and the positions as in attention. out of out_dtype (a GPU: bfloat16, D 128 or 256; "
        "the cpu: the dequantized float32 reference, out bfloat16, float16 or float32). "
        "workspace: fp8_workspace_bytes(v) bytes on the GPU (V's transposed copy; the Python "
        "layer allocates it from q's framework); ignored on the cpu. return_lse: cpu only.");
  m.def("fp8_workspace_bytes", fp8_workspace_bytes, nb::arg("v"), nb::kw_only(),
        nb::arg("stream") = 0,
        "Bytes of workspace attention_fp8 needs for v on the given stream's device (0 on the "
        "cpu).");
  m.def("quantize_fp8", quantize_fp8, nb::arg("x"),
        "Per-head e4m3 quantization of a cpu array x [B, L, H, D] (float32, float16 or "
        "bfloat16 bits): returns (x8 uint8 bit patterns of x's shape, descales float32 [H]) with "
        "descale_h = amax_h / 448 (1 for a head of zeros) and x8 = e4m3(x / descale_h), nearest "
        "even, saturating.");
}

}  // namespace tessera::python
