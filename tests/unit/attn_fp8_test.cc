// FP8 (e4m3) attention inputs (attn/fp8.h): per-head descales and quantization within half an
// e4m3 step of every element, and the FP8 reference attention against the bf16 reference at
// head dims 64/128/256 (causal and not, GQA, heads of very different magnitudes), with the
// error measured, printed and held under a bound derived from e4m3's 2^-4 relative step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "tessera/attn/fp8.h"
#include "tessera/attn/reference.h"
#include "tessera/core/error.h"
#include "unit/attn_test_util.h"

namespace tessera::attn {
namespace {

constexpr double kHalfStep = 1.0 / 16;  // e4m3 rounding error of a normal, relative

// x [B, L, H, D] with head h multiplied by mag[h].
Tensor scaled_heads(std::vector<int64_t> shape, const std::vector<float>& mag, uint32_t seed) {
  Tensor t = random_tensor(shape, DType::kBF16, seed);
  const int64_t h = shape[2], d = shape[3];
  for (int64_t i = 0; i < t.view().numel(); ++i) {
    const float x = load_as_float(t.data(), DType::kBF16, i) * mag[size_t((i / d) % h)];
    store_from_float(t.data(), DType::kBF16, i, x);
  }
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AttnFp8, PerHeadQuantizationIsWithinHalfAStep) {
  const std::vector<float> mag = {1.0f, 1e-3f, 300.0f, 0.0f};  // head 3 is all zeros
  Tensor x = scaled_heads({2, 9, 4, 64}, mag, 11);
  const std::vector<float> descales = fp8_head_descales(x);
  ASSERT_EQ(descales.size(), 4u);
  Tensor x8 = Tensor::empty({2, 9, 4, 64}, DType::kFP8E4M3, Device::cpu());
  quantize_fp8_per_head(x, descales, x8);
  for (int64_t h = 0; h < 4; ++h) {
    double amax = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t l = 0; l < 9; ++l)
        for (int64_t d = 0; d < 64; ++d)
          amax = std::max(amax, double(std::abs(at4(x, b, l, h, d))));
    if (amax == 0) {
      EXPECT_EQ(descales[size_t(h)], 1.0f);
    } else {
      EXPECT_FLOAT_EQ(descales[size_t(h)], float(amax / 448));
    }
    bool hit_max = false;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t l = 0; l < 9; ++l)
        for (int64_t d = 0; d < 64; ++d) {
          const double want = at4(x, b, l, h, d);
          const double got = double(at4(x8, b, l, h, d)) * descales[size_t(h)];
          const double bound =
              kHalfStep * std::abs(want) + std::ldexp(1.0, -10) * descales[size_t(h)];
          ASSERT_LE(std::abs(got - want), bound * (1 + 1e-6)) << "head " << h << " value " << want;
          hit_max |= std::abs(at4(x8, b, l, h, d)) == 448.0f;
        }
    EXPECT_EQ(hit_max, amax > 0) << "head " << h << ": its amax must map to +-448";
  }
}

TEST(AttnFp8, ArgumentsAreValidated) {
  Tensor x = random_tensor({1, 3, 2, 8}, DType::kBF16, 1);
  Tensor x8 = Tensor::empty({1, 3, 2, 8}, DType::kFP8E4M3, Device::cpu());
  const std::vector<float> one = {1.0f}, two = {1.0f, 1.0f}, bad = {1.0f, -2.0f};
  EXPECT_NE(error_of([&] { quantize_fp8_per_head(x, one, x8); }).find("descales has 1 values"),
            std::string::npos);
  EXPECT_NE(error_of([&] { quantize_fp8_per_head(x, bad, x8); }).find("descales[1] = -2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { quantize_fp8_per_head(x, two, x); }).find("out has dtype bf16"),
            std::string::npos);
  store_from_float(x.data(), DType::kBF16, 5, INFINITY);
  EXPECT_NE(error_of([&] { fp8_head_descales(x); }).find("x[0, 0, 0, 5] = inf"), std::string::npos);
  Tensor o = Tensor::empty({1, 3, 2, 8}, DType::kBF16, Device::cpu());
  const Fp8Descales ds{two, two, two};
  EXPECT_NE(error_of([&] {
              reference_attention_fp8(x, x8, x8, ds, {}, 1.0f, o, {});
            }).find("q has dtype bf16: expected fp8_e4m3"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              reference_attention_fp8(x8, x8, x8, {two, one, two}, {}, 1.0f, o, {});
            }).find("descales.k has 1 values"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              reference_attention_fp8(x8, x8, x8, ds, {}, 1.0f, x8, {});
            }).find("o has dtype fp8_e4m3"),
            std::string::npos);
}

// The bound: o is a convex combination of V rows, so V's quantization moves it by at most one
// half step of the head's largest value, 2^-4 max|v_h|. Q and K's quantization moves a score
// s_ij = c <q_i, k_j> by c sum_x (q_x dk_x + k_x dq_x) with |dq_x| <= 2^-4 |q_x|: independent
// roundings, each uniform within half a step, add up to a standard deviation of at most
// sigma_ij = c 2^-4 / sqrt(3) sqrt(sum_x 2 q_x^2 k_x^2); we allow 4 sigma of the worst pair.
// A score error of at most e moves the probabilities by sum_j |dp_j| <= 2 e (first order), so
// o by 2 e max|v_h|. Then the bf16 output's own rounding, 2^-9 |o|. The measured error is
// printed; it is far below the bound, which holds for any seed.
TEST(AttnFp8, AgainstBf16ReferenceWithinTheE4m3Bound) {
  const int64_t b = 1, lq = 37, lkv = 53, hq = 4, hkv = 2;
  const std::vector<float> qmag = {1.0f, 1.0f, 8.0f, 8.0f}, kmag = {1.0f, 0.125f};
  const std::vector<float> vmag = {1e-3f, 50.0f};  // per-tensor scaling would crush head 0
  uint32_t seed = 500;
  for (int64_t d : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      Tensor q = scaled_heads({b, lq, hq, d}, qmag, seed++);
      Tensor k = scaled_heads({b, lkv, hkv, d}, kmag, seed++);
      Tensor v = scaled_heads({b, lkv, hkv, d}, vmag, seed++);
      const MaskSpec mask = causal ? MaskSpec::causal_at(lkv - lq, 0) : MaskSpec::none();
      const float scale = default_softmax_scale(d);
      const KvChunk chunk{k, v, mask};
      const ReferenceResult ref =
          reference_attention(q, std::span<const KvChunk>(&chunk, 1), scale);

      const std::vector<float> dq = fp8_head_descales(q), dk = fp8_head_descales(k),
                               dv = fp8_head_descales(v);
      Tensor q8 = Tensor::empty({b, lq, hq, d}, DType::kFP8E4M3, Device::cpu());
      Tensor k8 = Tensor::empty({b, lkv, hkv, d}, DType::kFP8E4M3, Device::cpu());
      Tensor v8 = Tensor::empty({b, lkv, hkv, d}, DType::kFP8E4M3, Device::cpu());
      quantize_fp8_per_head(q, dq, q8);
      quantize_fp8_per_head(k, dk, k8);
      quantize_fp8_per_head(v, dv, v8);
      Tensor o = filled({b, lq, hq, d}, DType::kBF16, NAN);
      Tensor lse = filled({b, hq, lq}, DType::kF32, NAN);
      reference_attention_fp8(q8, k8, v8, {dq, dk, dv}, mask, scale, o, lse);

      // The same V quantized with one scale for the tensor (the largest head's), for contrast.
      const float tensor_descale = *std::max_element(dv.begin(), dv.end());
      const std::vector<float> dv_tensor(dv.size(), tensor_descale);
      Tensor v8_tensor = Tensor::empty({b, lkv, hkv, d}, DType::kFP8E4M3, Device::cpu());
      quantize_fp8_per_head(v, dv_tensor, v8_tensor);
      Tensor o_tensor = filled({b, lq, hq, d}, DType::kBF16, NAN);
      reference_attention_fp8(q8, k8, v8_tensor, {dq, dk, dv_tensor}, mask, scale, o_tensor, {});

      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv);
        double vmax = 0, omax = 0, sigma = 0, err = 0, err_tensor = 0;
        for (int64_t j = 0; j < lkv; ++j)
          for (int64_t x = 0; x < d; ++x)
            vmax = std::max(vmax, double(std::abs(at4(v, 0, j, g, x))));
        for (int64_t i = 0; i < lq; ++i)
          for (int64_t j = 0; j < lkv; ++j) {
            double sq = 0;
            for (int64_t x = 0; x < d; ++x) {
              const double p = double(at4(q, 0, i, h, x)) * at4(k, 0, j, g, x);
              sq += 2 * p * p;
            }
            sigma = std::max(sigma, scale * kHalfStep / std::sqrt(3.0) * std::sqrt(sq));
          }
        for (int64_t i = 0; i < lq; ++i) {
          for (int64_t x = 0; x < d; ++x) {
            const double want = ref.o_at(0, i, h, x);
            omax = std::max(omax, std::abs(want));
            err = std::max(err, std::abs(double(at4(o, 0, i, h, x)) - want));
            err_tensor = std::max(err_tensor, std::abs(double(at4(o_tensor, 0, i, h, x)) - want));
          }
          const double l = at3(lse, 0, h, i), lref = ref.lse_at(0, h, i);
          if (std::isinf(lref)) {
            EXPECT_EQ(l, lref);
          } else {
            EXPECT_LE(std::abs(l - lref), 4 * sigma + 1e-5) << "d " << d << " head " << h;
          }
        }
        const double bound = vmax * (kHalfStep + 2 * 4 * sigma) + omax / 512;
        std::cout << "[ fp8 e4m3 ] d " << d << (causal ? " causal" : "        ") << " head " << h
                  << " max|v| " << vmax << ": max|o_fp8 - o_bf16| = " << err << " (" << err / vmax
                  << " of max|v|), bound " << bound / vmax
                  << " of max|v|; one scale per tensor: " << err_tensor / vmax << "\n";
        RecordProperty(str("d", d, causal ? "_causal" : "", "_h", h, "_err_rel_vmax"),
                       std::to_string(err / vmax));
        EXPECT_LE(err, bound) << "d " << d << " causal " << causal << " head " << h;
        // Quantization did happen: the error is above the bf16 output rounding alone.
        EXPECT_GT(err, omax / 512 * 0.5) << "d " << d << " head " << h;
        // The small V head (0.001 next to 50): per-head scales keep it accurate, a per-tensor
        // scale sends it to e4m3's subnormals.
        if (vmag[size_t(g)] < 1) {
          EXPECT_LT(err * 2, err_tensor) << "d " << d << " head " << h;
        }
      }
    }
  }
}

// f32 output: exactly the float32 reference of the dequantized inputs; f16/bf16 outputs: that,
// rounded once.
TEST(AttnFp8, OutputIsTheF32ReferenceOfTheDequantizedInputs) {
  const int64_t d = 128, lq = 5, lkv = 7;
  Tensor q = random_tensor({1, lq, 2, d}, DType::kF32, 70);
  Tensor k = random_tensor({1, lkv, 1, d}, DType::kF32, 71);
  Tensor v = random_tensor({1, lkv, 1, d}, DType::kF32, 72);
  std::vector<float> dq = fp8_head_descales(q), dk = fp8_head_descales(k),
                     dv = fp8_head_descales(v);
  Tensor q8 = Tensor::empty({1, lq, 2, d}, DType::kFP8E4M3, Device::cpu());
  Tensor k8 = Tensor::empty({1, lkv, 1, d}, DType::kFP8E4M3, Device::cpu());
  Tensor v8 = Tensor::empty({1, lkv, 1, d}, DType::kFP8E4M3, Device::cpu());
  quantize_fp8_per_head(q, dq, q8);
  quantize_fp8_per_head(k, dk, k8);
  quantize_fp8_per_head(v, dv, v8);
  // Dequantize by hand, in the same order.
  auto dequant = [](const Tensor& x8, const std::vector<float>& ds, std::vector<int64_t> shape) {
    Tensor t = Tensor::empty(shape, DType::kF32, Device::cpu());
    for (int64_t i = 0; i < t.view().numel(); ++i)
      t.data_as<float>()[i] =
          load_as_float(x8.data(), DType::kFP8E4M3, i) * ds[size_t((i / shape[3]) % shape[2])];
    return t;
  };
  Tensor qf = dequant(q8, dq, {1, lq, 2, d}), kf = dequant(k8, dk, {1, lkv, 1, d}),
         vf = dequant(v8, dv, {1, lkv, 1, d});
  const MaskSpec mask = MaskSpec::causal_at(lkv - lq, 0);
  const KvChunk chunk{kf, vf, mask};
  const float scale = default_softmax_scale(d);
  const ReferenceResult want = reference_attention(qf, std::span<const KvChunk>(&chunk, 1), scale);
  Tensor o = filled({1, lq, 2, d}, DType::kF32, NAN);
  Tensor lse = filled({1, 2, lq}, DType::kF32, NAN);
  reference_attention_fp8(q8, k8, v8, {dq, dk, dv}, mask, scale, o, lse);
  for (size_t i = 0; i < want.o.size(); ++i) ASSERT_EQ(o.data_as<float>()[i], want.o[i]) << i;
  for (size_t i = 0; i < want.lse.size(); ++i) ASSERT_EQ(lse.data_as<float>()[i], want.lse[i]) << i;
  // f16 and bf16 outputs: the same values rounded once to the output dtype.
  for (DType out : {DType::kF16, DType::kBF16}) {
    Tensor o16 = filled({1, lq, 2, d}, out, NAN);
    reference_attention_fp8(q8, k8, v8, {dq, dk, dv}, mask, scale, o16, {});
    for (size_t i = 0; i < want.o.size(); ++i)
      ASSERT_EQ(load_as_float(o16.data(), out, int64_t(i)), round_to_dtype(out, want.o[i]))
          << dtype_name(out) << " " << i;
  }
}

// forward_fp8 on the cpu backend: the reference, with the descales read from f32 tensors, and
// every argument checked by name before anything runs.
TEST(AttnFp8, ForwardOnCpuIsTheReferenceAndChecksItsArguments) {
  const int64_t d = 128, lq = 6, lkv = 9;
  const Stream cpu = Stream::cpu();
  Tensor q = random_tensor({1, lq, 2, d}, DType::kBF16, 90);
  Tensor kv = random_tensor({1, lkv, 1, d}, DType::kBF16, 91);
  const std::vector<float> dq = fp8_head_descales(q), dkv = fp8_head_descales(kv);
  Tensor q8 = Tensor::empty({1, lq, 2, d}, DType::kFP8E4M3, Device::cpu());
  Tensor kv8 = Tensor::empty({1, lkv, 1, d}, DType::kFP8E4M3, Device::cpu());
  quantize_fp8_per_head(q, dq, q8);
  quantize_fp8_per_head(kv, dkv, kv8);
  auto f32s = [](const std::vector<float>& values) {
    Tensor t = Tensor::empty({int64_t(values.size())}, DType::kF32, Device::cpu());
    std::copy(values.begin(), values.end(), t.data_as<float>());
    return t;
  };
  Tensor dq_t = f32s(dq), dkv_t = f32s(dkv);
  const Fp8DescaleTensors descales{dq_t, dkv_t, dkv_t};
  const MaskSpec mask = MaskSpec::causal_at(lkv - lq, 0);
  const float scale = default_softmax_scale(d);
  EXPECT_EQ(fp8_workspace_bytes(kv8, cpu), 0);

  Tensor o = filled({1, lq, 2, d}, DType::kBF16, NAN), lse = filled({1, 2, lq}, DType::kF32, NAN);
  forward_fp8(q8, kv8, kv8, descales, mask, scale, o, lse, TensorView(), cpu);
  Tensor want = filled({1, lq, 2, d}, DType::kBF16, NAN);
  Tensor want_lse = filled({1, 2, lq}, DType::kF32, NAN);
  reference_attention_fp8(q8, kv8, kv8, {dq, dkv, dkv}, mask, scale, want, want_lse);
  EXPECT_EQ(std::memcmp(o.data(), want.data(), size_t(o.view().numel()) * 2), 0);
  EXPECT_EQ(std::memcmp(lse.data(), want_lse.data(), size_t(lse.view().numel()) * 4), 0);

  Tensor three = f32s({1, 1, 1});
  EXPECT_NE(error_of([&] {
              forward_fp8(q8, kv8, kv8, {three, dkv_t, dkv_t}, mask, scale, o, lse, {}, cpu);
            }).find("descales.q = f32[3] cpu: expected contiguous f32[2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              forward_fp8(q8, kv8, q8, descales, mask, scale, o, lse, {}, cpu);
            }).find("v = fp8_e4m3[1, 6, 2, 128] cpu: expected the shape of k"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              forward_fp8(q8, kv8, kv8, descales, mask, scale, lse, lse, {}, cpu);
            }).find("o = f32[1, 2, 6] cpu: expected the shape of q"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              forward_fp8(q8, kv8, kv8, descales, mask, 0.0f, o, lse, {}, cpu);
            }).find("softmax_scale = 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              forward_fp8(q8, kv8, kv8, descales, mask, scale, o, o, {}, cpu);
            }).find("lse = bf16[1, 6, 2, 128] cpu: expected f32[1, 2, 6]"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::attn
