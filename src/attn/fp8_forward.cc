// forward_fp8 (fp8.h): validate every argument for the stream's backend, then run the FP8
// reference (cpu) or V's transposed copy and the sm90 FP8 kernel (cuda).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attn/arg_checks.h"
#include "attn/attention_backend.h"
#include "attn/fp8_checks.h"
#include "tessera/attn/fp8.h"
#include "tessera/core/error.h"

namespace tessera::attn {

namespace {

using detail::check_on_stream;

// fp8_e4m3 [B, L, H, D], unit stride in D, on the stream's device.
void check_fp8_bshd(const TensorView& t, const Stream& stream, const char* what) {
  TESSERA_CHECK_ARG(t.ndim() == 4, what, " = ", t.to_string(), ": expected [B, L, H, D]");
  TESSERA_CHECK_ARG(t.dtype() == DType::kFP8E4M3, what, " has dtype ", dtype_name(t.dtype()),
                    ": expected fp8_e4m3");
  TESSERA_CHECK_ARG(t.size(3) <= 1 || t.stride(3) == 1, what, " = ", t.to_string(), " has stride ",
                    t.stride(3), " in D: expected 1");
  check_on_stream(t, stream, what);
}

// f32 [heads], contiguous, on the stream's device.
void check_descale(const TensorView& t, int64_t heads, const Stream& stream, const char* what) {
  TESSERA_CHECK_ARG(t.dtype() == DType::kF32 && t.ndim() == 1 && t.size(0) == heads &&
                        (heads <= 1 || t.stride(0) == 1),
                    what, " = ", t.to_string(), ": expected contiguous f32[", heads,
                    "] (one descale a head)");
  check_on_stream(t, stream, what);
}

std::vector<float> to_vector(const TensorView& t) {
  const float* data = t.data_as<const float>();
  return std::vector<float>(data, data + t.size(0));
}

}  // namespace

int64_t fp8_workspace_bytes(const TensorView& v, const Stream& stream) {
  TESSERA_CHECK_ARG(v.ndim() == 4, "v = ", v.to_string(), ": expected [B, L, H, D]");
  if (stream.backend() == Backend::kCpu) return 0;
  const int64_t keys = (v.size(1) + 127) / 128 * 128;  // kernels::fp8_vt_len
  return v.size(0) * v.size(2) * v.size(3) * keys;
}

void forward_fp8(const TensorView& q, const TensorView& k, const TensorView& v,
                 const Fp8DescaleTensors& descales, const MaskSpec& mask, float softmax_scale,
                 const TensorView& o, const TensorView& lse, const TensorView& workspace,
                 const Stream& stream) {
  for (const auto& [t, name] : {std::pair{q, "q"}, std::pair{k, "k"}, std::pair{v, "v"}})
    check_fp8_bshd(t, stream, name);
  detail::check_fp8_operands(q, k, v, mask, softmax_scale);
  check_descale(descales.q, q.size(2), stream, "descales.q");
  check_descale(descales.k, k.size(2), stream, "descales.k");
  check_descale(descales.v, v.size(2), stream, "descales.v");
  TESSERA_CHECK_ARG(o.ndim() == 4 && o.size(0) == q.size(0) && o.size(1) == q.size(1) &&
                        o.size(2) == q.size(2) && o.size(3) == q.size(3),
                    "o = ", o.to_string(), ": expected the shape of q = ", q.to_string());
  TESSERA_CHECK_ARG(o.size(3) <= 1 || o.stride(3) == 1, "o = ", o.to_string(), " has stride ",
                    o.stride(3), " in D: expected 1");
  check_on_stream(o, stream, "o");
  if (!lse.empty()) {
    TESSERA_CHECK_ARG(lse.dtype() == DType::kF32 && lse.ndim() == 3 && lse.size(0) == q.size(0) &&
                          lse.size(1) == q.size(2) && lse.size(2) == q.size(1),
                      "lse = ", lse.to_string(), ": expected f32[", q.size(0), ", ", q.size(2),
                      ", ", q.size(1), "] ([B, Hq, Lq])");
    check_on_stream(lse, stream, "lse");
  }

  if (stream.backend() == Backend::kCpu) {
    const std::vector<float> dq = to_vector(descales.q), dk = to_vector(descales.k),
                             dv = to_vector(descales.v);
    reference_attention_fp8(q, k, v, Fp8Descales{dq, dk, dv}, mask, softmax_scale, o, lse);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  TESSERA_CHECK(q.size(3) == 128 || q.size(3) == 256, ErrorCode::kUnsupported, "q = ",
                q.to_string(), " has head dim ", q.size(3),
                ": the cuda FP8 attention kernels take 128 or 256");
  TESSERA_CHECK(o.dtype() == DType::kBF16, ErrorCode::kUnsupported, "o has dtype ",
                dtype_name(o.dtype()), ": the cuda FP8 attention kernel writes bf16");
  for (const auto& [t, name] :
       {std::pair{q, "q"}, std::pair{k, "k"}, std::pair{v, "v"}, std::pair{o, "o"}})
    detail::cuda_check_supported(t, name, false);
  const int64_t need = fp8_workspace_bytes(v, stream);
  check_on_stream(workspace, stream, "workspace");
  TESSERA_CHECK_ARG(workspace.numel() * int64_t(workspace.element_size()) >= need &&
                        (workspace.numel() == 0 || workspace.is_contiguous()),
                    "workspace = ", workspace.to_string(), ": expected at least ", need,
                    " contiguous bytes (fp8_workspace_bytes)");
  TESSERA_CHECK_ARG(reinterpret_cast<uintptr_t>(workspace.data()) % 16 == 0, "workspace starts at ",
                    workspace.data(), ": expected 16-byte aligned data");
  detail::cuda_attention_fp8(q, k, v, descales, mask, softmax_scale, o, lse, workspace, stream);
#else
  (void)workspace;
  throw_error(ErrorCode::kUnsupported,
              "attn::forward_fp8: a cuda stream, but this build has no cuda backend");
#endif
}

}  // namespace tessera::attn
