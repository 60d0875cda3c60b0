// Per-head FP8 quantization and the FP8 attention reference (fp8.h): dequantize to float32,
// then the float32 reference of reference.h, so the FP8 path differs from the bf16 one only in
// its inputs.
#include "tessera/attn/fp8.h"

#include <cmath>
#include <string>

#include "attn/arg_checks.h"
#include "attn/fp8_checks.h"
#include "tessera/attn/reference.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"

namespace tessera::attn {

namespace {

bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

int64_t offset_bshd(const TensorView& t, int64_t b, int64_t l, int64_t h) {
  return b * t.stride(0) + l * t.stride(1) + h * t.stride(2);
}

void check_cpu_bshd(const TensorView& t, const char* what) {
  TESSERA_CHECK_ARG(t.device().kind == DeviceKind::kCpu, what, " = ", t.to_string(), " is on ",
                    t.device().to_string(), ": expected cpu");
  TESSERA_CHECK_ARG(t.ndim() == 4, what, " = ", t.to_string(), ": expected [B, L, H, D]");
  TESSERA_CHECK_ARG(t.size(3) <= 1 || t.stride(3) == 1, what, " = ", t.to_string(), " has stride ",
                    t.stride(3), " in D: expected 1");
}

void check_descales(std::span<const float> d, int64_t heads, const char* what) {
  TESSERA_CHECK_ARG(int64_t(d.size()) == heads, what, " has ", d.size(),
                    " values: expected one per head, ", heads);
  for (size_t h = 0; h < d.size(); ++h)
    TESSERA_CHECK_ARG(std::isfinite(d[h]) && d[h] > 0, what, "[", h, "] = ", d[h],
                      ": expected a finite value > 0");
}

// x8 [B, L, H, D] fp8 dequantized with its per-head descales into a contiguous f32 tensor.
Tensor dequantize(const TensorView& x8, std::span<const float> descales) {
  const int64_t nb = x8.size(0), nl = x8.size(1), nh = x8.size(2), nd = x8.size(3);
  Tensor out = Tensor::empty({nb, nl, nh, nd}, DType::kF32, Device::cpu());
  float* dst = out.data_as<float>();
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t h = 0; h < nh; ++h) {
        const uint8_t* src = x8.data_as<uint8_t>() + offset_bshd(x8, b, l, h);
        for (int64_t d = 0; d < nd; ++d)
          *dst++ = fp8_e4m3_bits_to_float(src[d]) * descales[size_t(h)];
      }
  return out;
}

}  // namespace

std::vector<float> fp8_head_descales(const TensorView& x) {
  check_cpu_bshd(x, "x");
  TESSERA_CHECK_ARG(is_float_dtype(x.dtype()), "x has dtype ", dtype_name(x.dtype()),
                    ": expected f32, bf16 or f16");
  std::vector<float> amax(size_t(x.size(2)), 0.0f);
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t l = 0; l < x.size(1); ++l)
      for (int64_t h = 0; h < x.size(2); ++h) {
        const int64_t base = offset_bshd(x, b, l, h);
        float& m = amax[size_t(h)];
        for (int64_t d = 0; d < x.size(3); ++d) {
          const float a = std::abs(load_as_float(x.data(), x.dtype(), base + d));
          TESSERA_CHECK_ARG(std::isfinite(a), "x[", b, ", ", l, ", ", h, ", ", d, "] = ", a,
                            ": expected finite values (head ", h, " has no amax)");
          m = std::max(m, a);
        }
      }
  std::vector<float> descales(amax.size());
  for (size_t h = 0; h < amax.size(); ++h) descales[h] = amax[h] > 0 ? amax[h] / kFP8E4M3Max : 1.0f;
  return descales;
}

void quantize_fp8_per_head(const TensorView& x, std::span<const float> descales,
                           const TensorView& out) {
  check_cpu_bshd(x, "x");
  check_cpu_bshd(out, "out");
  TESSERA_CHECK_ARG(is_float_dtype(x.dtype()), "x has dtype ", dtype_name(x.dtype()),
                    ": expected f32, bf16 or f16");
  TESSERA_CHECK_ARG(out.dtype() == DType::kFP8E4M3, "out has dtype ", dtype_name(out.dtype()),
                    ": expected fp8_e4m3");
  for (int d = 0; d < 4; ++d)
    TESSERA_CHECK_ARG(out.size(d) == x.size(d), "out = ", out.to_string(),
                      ": expected the shape of x = ", x.to_string());
  check_descales(descales, x.size(2), "descales");
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t l = 0; l < x.size(1); ++l)
      for (int64_t h = 0; h < x.size(2); ++h) {
        const int64_t xbase = offset_bshd(x, b, l, h);
        uint8_t* dst = out.data_as<uint8_t>() + offset_bshd(out, b, l, h);
        const float descale = descales[size_t(h)];
        for (int64_t d = 0; d < x.size(3); ++d)
          dst[d] = float_to_fp8_e4m3_bits(load_as_float(x.data(), x.dtype(), xbase + d) / descale);
      }
}

namespace detail {

void check_fp8_operands(const TensorView& q, const TensorView& k, const TensorView& v,
                        const MaskSpec& mask, float softmax_scale) {
  check_softmax_scale(softmax_scale);
  for (int d = 0; d < 4; ++d)
    TESSERA_CHECK_ARG(v.size(d) == k.size(d), "v = ", v.to_string(),
                      ": expected the shape of k = ", k.to_string());
  TESSERA_CHECK_ARG(k.size(0) == q.size(0) && k.size(3) == q.size(3), "k = ", k.to_string(),
                    ": expected q's batch ", q.size(0), " and head dim ", q.size(3));
  TESSERA_CHECK_ARG(k.size(2) >= 1 && q.size(2) % k.size(2) == 0, "k = ", k.to_string(), " has ",
                    k.size(2), " heads: expected a divisor of q's ", q.size(2));
  TESSERA_CHECK_ARG(mask.q_stride >= 1 && mask.kv_stride >= 1, "mask has q_stride ", mask.q_stride,
                    ", kv_stride ", mask.kv_stride, ": expected both >= 1");
}

}  // namespace detail

void reference_attention_fp8(const TensorView& q, const TensorView& k, const TensorView& v,
                             const Fp8Descales& descales, const MaskSpec& mask, float softmax_scale,
                             const TensorView& o, const TensorView& lse) {
  for (const auto& [t, name] : {std::pair{q, "q"}, std::pair{k, "k"}, std::pair{v, "v"}}) {
    check_cpu_bshd(t, name);
    TESSERA_CHECK_ARG(t.dtype() == DType::kFP8E4M3, name, " has dtype ", dtype_name(t.dtype()),
                      ": expected fp8_e4m3");
  }
  detail::check_fp8_operands(q, k, v, mask, softmax_scale);
  check_descales(descales.q, q.size(2), "descales.q");
  check_descales(descales.k, k.size(2), "descales.k");
  check_descales(descales.v, v.size(2), "descales.v");
  check_cpu_bshd(o, "o");
  TESSERA_CHECK_ARG(is_float_dtype(o.dtype()), "o has dtype ", dtype_name(o.dtype()),
                    ": expected bf16, f16 or f32");
  for (int d = 0; d < 4; ++d)
    TESSERA_CHECK_ARG(o.size(d) == q.size(d), "o = ", o.to_string(),
                      ": expected the shape of q = ", q.to_string());
  if (!lse.empty()) {
    TESSERA_CHECK_ARG(lse.device().kind == DeviceKind::kCpu && lse.dtype() == DType::kF32 &&
                          lse.ndim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(2) &&
                          lse.size(2) == q.size(1),
                      "lse = ", lse.to_string(), ": expected cpu f32[", q.size(0), ", ", q.size(2),
                      ", ", q.size(1), "] ([B, Hq, Lq])");
  }

  const Tensor qf = dequantize(q, descales.q), kf = dequantize(k, descales.k),
               vf = dequantize(v, descales.v);
  const KvChunk chunk{kf, vf, mask};
  const ReferenceResult r =
      reference_attention(qf, std::span<const KvChunk>(&chunk, 1), softmax_scale);
  for (int64_t b = 0; b < r.batch; ++b)
    for (int64_t i = 0; i < r.lq; ++i)
      for (int64_t h = 0; h < r.heads; ++h) {
        const int64_t base = offset_bshd(o, b, i, h);
        for (int64_t d = 0; d < r.head_dim; ++d)
          store_from_float(o.data(), o.dtype(), base + d, r.o_at(b, i, h, d));
        if (!lse.empty())
          lse.data_as<float>()[b * lse.stride(0) + h * lse.stride(1) + i * lse.stride(2)] =
              r.lse_at(b, h, i);
      }
}

}  // namespace tessera::attn
