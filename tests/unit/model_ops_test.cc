// The layer operations on the cpu backend against float64 values computed here from the same
// (dtype-rounded) inputs, at sizes 1, odd and non-multiples of any vector width, in f32, bf16
// and f16; strided and in-place views; and argument errors naming the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/model/ops.h"

namespace tessera::model {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
const Stream kCpu = Stream::cpu();

// A cpu tensor of `dtype` holding `values` (rounded to the dtype).
Tensor make(const std::vector<int64_t>& shape, DType dtype, const std::vector<float>& values) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  for (size_t i = 0; i < values.size(); ++i)
    store_from_float(t.data(), dtype, int64_t(i), values[i]);
  return t;
}

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The values of `t` (contiguous) as double.
std::vector<double> values_of(const TensorView& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = load_as_float(t.data(), t.dtype(), i);
  return v;
}

// One rounding to the dtype, plus float32 arithmetic's own error on the way.
double tolerance(DType dtype, double expected) {
  const double ulp = dtype == DType::kBF16 ? 1.0 / 128 : dtype == DType::kF16 ? 1.0 / 1024 : 1e-6;
  return ulp * std::max(1.0, std::fabs(expected)) + 1e-6;
}

void expect_near_all(const TensorView& got, const std::vector<double>& expected, const char* what) {
  ASSERT_EQ(size_t(got.numel()), expected.size()) << what;
  const std::vector<double> v = values_of(got);
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(v[i], expected[i], tolerance(got.dtype(), expected[i]))
        << what << " element " << i << " (" << dtype_name(got.dtype()) << ")";
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ModelOps, RmsNormWithAndWithoutResidualMatchesFloat64) {
  for (DType dtype : kFloatTypes)
    for (int64_t rows : {1, 3})
      for (int64_t c : {1, 7, 37}) {
        const size_t n = size_t(rows * c);
        Tensor x = make({rows, c}, dtype, random_values(n, 1));
        Tensor res = make({rows, c}, dtype, random_values(n, 2));
        Tensor w = make({c}, dtype, random_values(size_t(c), 3, 0.5f, 1.5f));
        Tensor out = make({rows, c}, dtype, std::vector<float>(n, NAN));
        Tensor res_out = make({rows, c}, dtype, std::vector<float>(n, NAN));
        const std::vector<double> xv = values_of(x), rv = values_of(res), wv = values_of(w);
        const double eps = 1e-5;
        for (bool fused : {false, true}) {
          std::vector<double> h(n), expected(n);
          for (size_t i = 0; i < n; ++i)
            h[i] = fused ? round_to_dtype(dtype, float(xv[i] + rv[i])) : xv[i];
          for (int64_t r = 0; r < rows; ++r) {
            double ss = 0;
            for (int64_t j = 0; j < c; ++j) ss += h[size_t(r * c + j)] * h[size_t(r * c + j)];
            const double inv = 1.0 / std::sqrt(ss / double(c) + eps);
            for (int64_t j = 0; j < c; ++j)
              expected[size_t(r * c + j)] = h[size_t(r * c + j)] * inv * wv[size_t(j)];
          }
          rms_norm(x, fused ? Residual{res, res_out} : Residual{}, w, float(eps), out, kCpu);
          expect_near_all(out, expected, "rms_norm out");
          if (fused) expect_near_all(res_out, h, "rms_norm residual.out");
        }
      }
}

TEST(ModelOps, RmsNormInPlaceOnStridedRows) {
  // Rows 5 apart in a [3, 5] buffer, C = 3; the residual is updated in place, as a decoder's
  // residual stream is.
  std::vector<float> xs = random_values(15, 4), rs = random_values(15, 5);
  Tensor xb = make({3, 5}, DType::kF32, xs), rb = make({3, 5}, DType::kF32, rs);
  const TensorView x = TensorView(xb.data(), DType::kF32, Device::cpu(), {3, 3}, {5, 1});
  const TensorView r = TensorView(rb.data(), DType::kF32, Device::cpu(), {3, 3}, {5, 1});
  Tensor w = make({3}, DType::kF32, {1.0f, 2.0f, 0.5f});
  rms_norm(x, {r, r}, w, 1e-6f, x, kCpu);
  for (int row = 0; row < 3; ++row) {
    double h[3], ss = 0;
    for (int j = 0; j < 3; ++j) ss += (h[j] = double(xs[row * 5 + j] + rs[row * 5 + j])) * h[j];
    const double inv = 1.0 / std::sqrt(ss / 3 + 1e-6);
    const double wj[3] = {1.0, 2.0, 0.5};
    for (int j = 0; j < 3; ++j) {
      EXPECT_NEAR(rb.data_as<float>()[row * 5 + j], h[j], 1e-6);
      EXPECT_NEAR(xb.data_as<float>()[row * 5 + j], h[j] * inv * wj[j], 1e-5);
    }
    for (int j = 3; j < 5; ++j) {  // outside the view: untouched
      EXPECT_EQ(xb.data_as<float>()[row * 5 + j], xs[size_t(row * 5 + j)]);
      EXPECT_EQ(rb.data_as<float>()[row * 5 + j], rs[size_t(row * 5 + j)]);
    }
  }
}

TEST(ModelOps, RmsNormHandValues) {
  // [3, 4]: mean square 12.5, so out = x / sqrt(12.5 + eps).
  Tensor x = make({1, 2}, DType::kF32, {3.0f, 4.0f});
  Tensor w = make({2}, DType::kF32, {1.0f, 1.0f});
  Tensor out = make({1, 2}, DType::kF32, {0, 0});
  rms_norm(x, {}, w, 1e-6f, out, kCpu);
  EXPECT_NEAR(out.data_as<float>()[0], 3.0 / std::sqrt(12.5 + 1e-6), 1e-6);
  EXPECT_NEAR(out.data_as<float>()[1], 4.0 / std::sqrt(12.5 + 1e-6), 1e-6);
}

TEST(ModelOps, LayerNormMatchesFloat64WithAndWithoutAffine) {
  for (DType dtype : kFloatTypes)
    for (int64_t c : {1, 5, 33})
      for (bool affine : {false, true}) {
        const int64_t rows = 3;
        const size_t n = size_t(rows * c);
        // A large mean (as DiT activations have): a one-pass variance would cancel.
        Tensor x = make({rows, c}, dtype, random_values(n, 6, 90.0f, 110.0f));
        Tensor res = make({rows, c}, dtype, random_values(n, 7));
        Tensor w = make({c}, dtype, random_values(size_t(c), 8, 0.5f, 1.5f));
        Tensor b = make({c}, dtype, random_values(size_t(c), 9));
        Tensor out = make({rows, c}, dtype, std::vector<float>(n, NAN));
        Tensor res_out = make({rows, c}, dtype, std::vector<float>(n, NAN));
        const std::vector<double> xv = values_of(x), rv = values_of(res);
        const std::vector<double> wv = values_of(w), bv = values_of(b);
        std::vector<double> h(n), expected(n);
        for (size_t i = 0; i < n; ++i) h[i] = round_to_dtype(dtype, float(xv[i] + rv[i]));
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0;
          for (int64_t j = 0; j < c; ++j) mean += h[size_t(r * c + j)] / double(c);
          for (int64_t j = 0; j < c; ++j)
            var += (h[size_t(r * c + j)] - mean) * (h[size_t(r * c + j)] - mean) / double(c);
          for (int64_t j = 0; j < c; ++j) {
            double y = (h[size_t(r * c + j)] - mean) / std::sqrt(var + 1e-6);
            if (affine) y = y * wv[size_t(j)] + bv[size_t(j)];
            expected[size_t(r * c + j)] = y;
          }
        }
        layer_norm(x, {res, res_out}, affine ? w.view() : TensorView{},
                   affine ? b.view() : TensorView{}, 1e-6f, out, kCpu);
        // Normalizing h ~ 100 with spread ~1: float32's error grows by ~|h| / std.
        const std::vector<double> got = values_of(out);
        for (size_t i = 0; i < n; ++i)
          ASSERT_NEAR(got[i], expected[i], tolerance(dtype, expected[i]) + 2e-4)
              << dtype_name(dtype) << " c " << c << " element " << i;
        expect_near_all(res_out, h, "layer_norm residual.out");
      }
}

TEST(ModelOps, RopeInvFreqWithLlama3Scaling) {
  const std::vector<float> plain = rope_inv_freq(128, 500000.0, {});
  ASSERT_EQ(plain.size(), 64u);
  for (int i : {0, 1, 31, 63})
    EXPECT_FLOAT_EQ(plain[size_t(i)], float(std::pow(500000.0, -2.0 * i / 128)));
  RopeScaling s;
  s.llama3 = true;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 8192;
  const std::vector<float> scaled = rope_inv_freq(128, 500000.0, s);
  const double pi = 3.14159265358979323846;
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 128), wavelen = 2 * pi / f;
    double expected = f;
    if (wavelen > 8192) {
      expected = f / 8;
      ++divided;
    } else if (wavelen >= 2048) {
      const double smooth = (8192 / wavelen - 1) / 3;
      expected = (1 - smooth) * f / 8 + smooth * f;
      ++blended;
    } else {
      ++kept;
    }
    EXPECT_FLOAT_EQ(scaled[size_t(i)], float(expected)) << i;
  }
  // Llama 3's 128-dim heads have frequencies in all three bands.
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  EXPECT_FLOAT_EQ(scaled[0], 1.0f);
  EXPECT_FLOAT_EQ(scaled[63], plain[63] / 8);
  EXPECT_NE(error_of([] { rope_inv_freq(7, 1e4, {}); }).find("rotary_dim = 7"), std::string::npos);
  EXPECT_NE(error_of([] { rope_inv_freq(8, -1, {}); }).find("theta = -1"), std::string::npos);
}

TEST(ModelOps, RopeRotatesHalvesAndPassesTheRestThrough) {
  // A packed qkv row [T, 3 * H, D]: rotate the q part (H heads) in place, R = 4 of D = 6.
  for (DType dtype : kFloatTypes)
    for (DType pos_dtype : {DType::kI32, DType::kI64}) {
      const int64_t t_len = 3, heads = 5, dim = 6;
      const size_t n = size_t(t_len * 3 * heads * dim);
      Tensor qkv = make({t_len, 3 * heads, dim}, dtype, random_values(n, 10));
      const std::vector<double> before = values_of(qkv);
      const TensorView q = qkv.view().slice(1, 0, heads);
      Tensor positions = Tensor::empty({t_len}, pos_dtype, Device::cpu());
      const int64_t pos[3] = {0, 7, 131071};
      for (int t = 0; t < 3; ++t) {
        if (pos_dtype == DType::kI64)
          positions.data_as<int64_t>()[t] = pos[t];
        else
          positions.data_as<int32_t>()[t] = int32_t(pos[t]);
      }
      const std::vector<float> freq = rope_inv_freq(4, 10000.0, {});
      Tensor inv_freq = make({2}, DType::kF32, freq);
      rope(q, positions, inv_freq, q, kCpu);
      const std::vector<double> after = values_of(qkv);
      for (int64_t t = 0; t < t_len; ++t)
        for (int64_t h = 0; h < 3 * heads; ++h) {
          const size_t base = size_t((t * 3 * heads + h) * dim);
          for (int64_t d = 0; d < dim; ++d) {
            double expected = before[base + size_t(d)];
            if (h < heads && d < 4) {
              const int64_t i = d % 2;
              const double angle = double(float(pos[t]) * freq[size_t(i)]);
              const double a = before[base + size_t(i)], b = before[base + size_t(i + 2)];
              expected = d < 2 ? a * std::cos(angle) - b * std::sin(angle)
                               : b * std::cos(angle) + a * std::sin(angle);
            }
            ASSERT_NEAR(after[base + size_t(d)], expected, tolerance(dtype, expected))
                << dtype_name(dtype) << " t " << t << " h " << h << " d " << d;
          }
        }
    }
}

TEST(ModelOps, SiluAndMulAndGeluMatchFloat64) {
  for (DType dtype : kFloatTypes)
    for (int64_t c : {1, 9, 67}) {
      const int64_t rows = 3;
      const size_t n = size_t(rows * c);
      // gate and up are the two halves of one [N, 2F] projection output.
      Tensor gate_up = make({rows, 2 * c}, dtype, random_values(2 * n, 11, -6.0f, 6.0f));
      const TensorView gate = gate_up.view().slice(1, 0, c), up = gate_up.view().slice(1, c, c);
      Tensor out = make({rows, c}, dtype, std::vector<float>(n, NAN));
      silu_and_mul(gate, up, out, kCpu);
      const std::vector<double> gu = values_of(gate_up);
      std::vector<double> expected(n);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c; ++j) {
          const double g = gu[size_t(r * 2 * c + j)], u = gu[size_t(r * 2 * c + c + j)];
          expected[size_t(r * c + j)] = g / (1 + std::exp(-g)) * u;
        }
      expect_near_all(out, expected, "silu_and_mul");

      Tensor x = make({rows, c}, dtype, random_values(n, 12, -6.0f, 6.0f));
      const std::vector<double> xv = values_of(x);
      for (size_t i = 0; i < n; ++i)
        expected[i] =
            0.5 * xv[i] *
            (1 + std::tanh(std::sqrt(2 / M_PI) * (xv[i] + 0.044715 * xv[i] * xv[i] * xv[i])));
      gelu_tanh(x, x, kCpu);  // in place
      expect_near_all(x, expected, "gelu_tanh");
    }
  // Hand values: silu(1) * 2 and gelu_tanh(1), gelu_tanh(-3).
  Tensor g = make({1, 1}, DType::kF32, {1.0f}), u = make({1, 1}, DType::kF32, {2.0f});
  Tensor o = make({1, 1}, DType::kF32, {0.0f});
  silu_and_mul(g, u, o, kCpu);
  EXPECT_NEAR(o.data_as<float>()[0], 1.4621171572600098, 1e-6);
  Tensor x = make({1, 2}, DType::kF32, {1.0f, -3.0f});
  gelu_tanh(x, x, kCpu);
  EXPECT_NEAR(x.data_as<float>()[0], 0.8411919906082768, 1e-6);
  EXPECT_NEAR(x.data_as<float>()[1], -0.0036373920817729943, 1e-7);
}

TEST(ModelOps, AdalnModulateBroadcastsShiftAndScaleOverTokens) {
  for (DType dtype : kFloatTypes) {
    const int64_t b_len = 2, l_len = 3, c = 5;
    Tensor x = make({b_len, l_len, c}, dtype, random_values(size_t(b_len * l_len * c), 13));
    // shift and scale are chunks 0 and 1 of the adaLN linear's [B, 6C] output.
    Tensor mod = make({b_len, 6 * c}, dtype, random_values(size_t(b_len * 6 * c), 14));
    const TensorView shift = mod.view().slice(1, 0, c), scale = mod.view().slice(1, c, c);
    Tensor out = make({b_len, l_len, c}, dtype, std::vector<float>(size_t(b_len * l_len * c), NAN));
    adaln_modulate(x, shift, scale, out, kCpu);
    const std::vector<double> xv = values_of(x), mv = values_of(mod);
    std::vector<double> expected(size_t(b_len * l_len * c));
    for (int64_t b = 0; b < b_len; ++b)
      for (int64_t l = 0; l < l_len; ++l)
        for (int64_t j = 0; j < c; ++j) {
          const size_t i = size_t((b * l_len + l) * c + j);
          expected[i] = xv[i] * (1 + mv[size_t(b * 6 * c + c + j)]) + mv[size_t(b * 6 * c + j)];
        }
    expect_near_all(out, expected, "adaln_modulate");
  }
}

TEST(ModelOps, GatedAddAndSiluMatchFloat64) {
  for (DType dtype : kFloatTypes) {
    const int64_t b_len = 2, l_len = 3, c = 5, n = b_len * l_len * c;
    Tensor x = make({b_len, l_len, c}, dtype, random_values(size_t(n), 21));
    Tensor y = make({b_len, l_len, c}, dtype, random_values(size_t(n), 22));
    Tensor gate = make({b_len, c}, dtype, random_values(size_t(b_len * c), 23));
    const std::vector<double> xv = values_of(x), yv = values_of(y), gv = values_of(gate);
    gated_add(x, y, gate, x, kCpu);  // in place
    std::vector<double> expected(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / (l_len * c), j = i % c;
      expected[size_t(i)] = xv[size_t(i)] + gv[size_t(b * c + j)] * yv[size_t(i)];
    }
    expect_near_all(x, expected, "gated_add");

    Tensor a = make({3, 7}, dtype, random_values(21, 24, -8.0f, 8.0f));
    Tensor out = make({3, 7}, dtype, std::vector<float>(21, NAN));
    silu(a, out, kCpu);
    std::vector<double> want;
    for (double v : values_of(a)) want.push_back(v / (1.0 + std::exp(-v)));
    expect_near_all(out, want, "silu");
  }
}

// Per head: RMSNorm over D then the interleaved pairs rotated by the tables' angles; on q inside
// a packed [T, 3C] row (strided), in place, and without tables (norm only).
TEST(ModelOps, HeadRmsNormRotaryNormalizesEachHeadThenTurnsItsPairs) {
  for (DType dtype : kFloatTypes)
    for (bool tables : {true, false}) {
      const int64_t t_len = 3, heads = 2, d = 6, c = heads * d;
      Tensor qkv = make({t_len, 3 * c}, dtype, random_values(size_t(t_len * 3 * c), 25));
      Tensor weight = make({d}, dtype, random_values(size_t(d), 26, 0.5f, 1.5f));
      std::vector<float> angles = random_values(size_t(t_len * d), 27, -3.0f, 3.0f);
      std::vector<float> cos_v, sin_v;
      for (float a : angles) {
        cos_v.push_back(std::cos(a));
        sin_v.push_back(std::sin(a));
      }
      Tensor cos_t = make({t_len, d}, DType::kF32, cos_v), sin_t = make({t_len, d}, DType::kF32, sin_v);
      const std::vector<double> before = values_of(qkv), wv = values_of(weight);
      const TensorView q(qkv.data(), dtype, Device::cpu(), {t_len, heads, d}, {3 * c, d, 1});
      head_rms_norm_rotary(q, weight, 1e-6f, tables ? cos_t.view() : TensorView(),
                           tables ? sin_t.view() : TensorView(), q, kCpu);
      std::vector<double> expected = before;
      for (int64_t t = 0; t < t_len; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          const size_t row = size_t(t * 3 * c + h * d);
          double sum_sq = 0;
          for (int64_t e = 0; e < d; ++e) sum_sq += before[row + size_t(e)] * before[row + size_t(e)];
          const double inv = 1.0 / std::sqrt(sum_sq / double(d) + 1e-6);
          for (int64_t e = 0; e < d; e += 2) {
            const double a = before[row + size_t(e)] * inv * wv[size_t(e)];
            const double b = before[row + size_t(e) + 1] * inv * wv[size_t(e) + 1];
            const size_t k = size_t(t * d + e);
            expected[row + size_t(e)] = tables ? a * cos_v[k] - b * sin_v[k] : a;
            expected[row + size_t(e) + 1] = tables ? b * cos_v[k + 1] + a * sin_v[k + 1] : b;
          }
        }
      expect_near_all(qkv, expected, tables ? "head_rms_norm_rotary" : "head_rms_norm_rotary, no tables");
    }
}

TEST(ModelOps, EmbeddingCopiesRowsAndRefusesIdsOutsideTheTable) {
  for (DType id_dtype : {DType::kI32, DType::kI64}) {
    Tensor table = make({5, 3}, DType::kBF16, random_values(15, 15));
    Tensor ids = Tensor::empty({4}, id_dtype, Device::cpu());
    const int64_t rows[4] = {4, 0, 4, 2};
    for (int i = 0; i < 4; ++i) store_from_float(ids.data(), id_dtype, i, float(rows[i]));
    Tensor out = make({4, 3}, DType::kBF16, std::vector<float>(12, NAN));
    embedding(ids, table, out, kCpu);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j)
        EXPECT_EQ(out.data_as<uint16_t>()[i * 3 + j], table.data_as<uint16_t>()[rows[i] * 3 + j]);
    store_from_float(ids.data(), id_dtype, 1, 5.0f);
    EXPECT_NE(error_of([&] {
                embedding(ids, table, out, kCpu);
              }).find("ids[1] = 5: expected 0 to 4 (the table's rows)"),
              std::string::npos);
    store_from_float(ids.data(), id_dtype, 1, -1.0f);
    EXPECT_NE(error_of([&] { embedding(ids, table, out, kCpu); }).find("ids[1] = -1"),
              std::string::npos);
  }
}

TEST(ModelOps, ScatterRowsWritesStridedRowsIntoTheTableAndLeavesTheRest) {
  // src: columns [2, 5) of [3, 6] rows (a strided view, as k inside a packed qkv projection).
  Tensor packed = make({3, 6}, DType::kBF16, random_values(18, 21));
  const TensorView src(packed.data_as<uint16_t>() + 2, DType::kBF16, Device::cpu(), {3, 3},
                       {6, 1});
  Tensor table = make({6, 3}, DType::kBF16, random_values(18, 22));
  const std::vector<uint16_t> before(table.data_as<uint16_t>(), table.data_as<uint16_t>() + 18);
  Tensor ids = Tensor::empty({3}, DType::kI32, Device::cpu());
  const int32_t rows[3] = {5, 1, 3};
  std::copy(rows, rows + 3, ids.data_as<int32_t>());
  scatter_rows(src, ids, table, kCpu);
  for (int64_t r = 0; r < 6; ++r) {
    const int64_t n = std::find(rows, rows + 3, r) - rows;
    for (int64_t c = 0; c < 3; ++c) {
      const uint16_t want = n < 3 ? packed.data_as<uint16_t>()[n * 6 + 2 + c] : before[r * 3 + c];
      EXPECT_EQ(table.data_as<uint16_t>()[r * 3 + c], want) << "row " << r << " col " << c;
    }
  }
  ids.data_as<int32_t>()[2] = 6;
  EXPECT_NE(error_of([&] { scatter_rows(src, ids, table, kCpu); }).find("ids[2] = 6"),
            std::string::npos);
  Tensor narrow = make({6, 2}, DType::kBF16, std::vector<float>(12, 0.0f));
  EXPECT_NE(error_of([&] { scatter_rows(src, ids, narrow, kCpu); }).find("table"),
            std::string::npos);
}

TEST(ModelOps, ArgmaxTakesTheLowestIndexAmongEqualsAndNaNAsLargest) {
  const float inf = std::numeric_limits<float>::infinity(), nan = NAN;
  // Rows: a plain maximum at an odd index; a tie (lowest wins); all -inf; a NaN; V = 7 each.
  Tensor logits = make({4, 7}, DType::kF32, {0,    1,    2,    3,    9,    5,    6,     //
                                             1,    4,    2,    4,    0,    4,    3,     //
                                             -inf, -inf, -inf, -inf, -inf, -inf, -inf,  //
                                             1,    2,    nan,  9,    nan,  0,    0});
  for (DType out_dtype : {DType::kI32, DType::kI64}) {
    Tensor out = Tensor::empty({4}, out_dtype, Device::cpu());
    argmax(logits, out, kCpu);
    const int64_t expected[4] = {4, 1, 0, 2};
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out_dtype == DType::kI64 ? out.data_as<int64_t>()[i] : out.data_as<int32_t>()[i],
                expected[i])
          << i;
  }
  for (DType dtype : kFloatTypes) {  // V = 1, and a random odd-sized vocabulary
    Tensor one = make({1, 1}, dtype, {-3.0f});
    Tensor out = Tensor::empty({1}, DType::kI64, Device::cpu());
    argmax(one, out, kCpu);
    EXPECT_EQ(out.data_as<int64_t>()[0], 0);
    std::vector<float> v = random_values(1001, 16);
    v[777] = 3.0f;
    Tensor big = make({1, 1001}, dtype, v);
    argmax(big, out, kCpu);
    EXPECT_EQ(out.data_as<int64_t>()[0], 777);
  }
}

TEST(ModelOps, ArgumentsAreCheckedNamingThem) {
  Tensor x = make({2, 3}, DType::kF32, random_values(6, 17));
  Tensor xb = make({2, 3}, DType::kBF16, random_values(6, 17));
  Tensor w = make({3}, DType::kF32, {1, 1, 1});
  Tensor w4 = make({4}, DType::kF32, {1, 1, 1, 1});
  Tensor out = make({2, 3}, DType::kF32, std::vector<float>(6));
  Tensor big = make({2, 4}, DType::kF32, std::vector<float>(8));
  Tensor ids = Tensor::empty({2}, DType::kI32, Device::cpu());
  auto has = [](const std::string& message, const char* part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  has(error_of([&] { rms_norm(x, {}, w4, 1e-5f, out, kCpu); }),
      "weight = f32[4] cpu: expected [3] (C of x)");
  has(error_of([&] { rms_norm(x, {}, w, 0.0f, out, kCpu); }),
      "eps = 0: expected a finite value > 0");
  has(error_of([&] { rms_norm(x, {}, w, NAN, out, kCpu); }), "eps = nan");
  has(error_of([&] { rms_norm(x, {}, w, 1e-5f, big, kCpu); }),
      "out = f32[2, 4] cpu: expected the shape of x = f32[2, 3] cpu");
  has(error_of([&] { rms_norm(xb, {}, w, 1e-5f, out, kCpu); }),
      "out has dtype f32: expected bf16 (x's)");
  has(error_of([&] {
        rms_norm(x, {x, {}}, w, 1e-5f, out, kCpu);
      }),
      "residual.out is empty but residual.in is not");
  has(error_of([&] {
        rms_norm(x, {x, out}, w, 1e-5f, out, kCpu);
      }),
      "out and residual.out are the same tensor");
  // out shifted by one element over x: neither in place nor disjoint.
  const TensorView shifted = big.view().flat(1, 6);
  const TensorView x_in_big = big.view().flat(0, 6);
  const int64_t shape[2] = {2, 3};
  const TensorView a =
      TensorView::contiguous(x_in_big.data(), DType::kF32, Device::cpu(), shape, 2);
  const TensorView b = TensorView::contiguous(shifted.data(), DType::kF32, Device::cpu(), shape, 2);
  has(error_of([&] { gelu_tanh(a, b, kCpu); }), "out = f32[2, 3] cpu overlaps x = f32[2, 3] cpu");
  const TensorView column(x.data(), DType::kF32, Device::cpu(), {2, 3}, {1, 2});
  has(error_of([&] { gelu_tanh(column, out, kCpu); }),
      "x = f32[2, 3] cpu has stride 2 in C: expected 1");
  Tensor i8 = Tensor::empty({2, 3}, DType::kU8, Device::cpu());
  has(error_of([&] { gelu_tanh(i8, out, kCpu); }), "x has dtype u8: expected bf16, f16 or f32");
  has(error_of([&] { silu_and_mul(x, big, out, kCpu); }),
      "up = f32[2, 4] cpu: expected the shape of gate");
  has(error_of([&] { layer_norm(x, {}, w, w4, 1e-5f, out, kCpu); }),
      "bias = f32[4] cpu: expected [3]");
  Tensor shift = make({1, 3}, DType::kF32, {0, 0, 0});
  Tensor x3 = make({2, 1, 3}, DType::kF32, std::vector<float>(6));
  has(error_of([&] { adaln_modulate(x3, shift, shift, x3, kCpu); }),
      "shift = f32[1, 3] cpu: expected [2, 3] [B, C] of x");
  has(error_of([&] { adaln_modulate(x, x, x, x, kCpu); }),
      "x = f32[2, 3] cpu: expected 3 dims [B, L, C]");
  has(error_of([&] { gated_add(x3, x3, shift, x3, kCpu); }),
      "gate = f32[1, 3] cpu: expected [2, 3] [B, C] of x");
  has(error_of([&] { silu(x, big, kCpu); }), "out = f32[2, 4] cpu: expected the shape of x");
  Tensor heads5 = make({2, 1, 5}, DType::kF32, std::vector<float>(10));
  Tensor w5 = make({5}, DType::kF32, {1, 1, 1, 1, 1});
  has(error_of([&] { head_rms_norm_rotary(heads5, w5, 1e-6f, {}, {}, heads5, kCpu); }),
      "expected an even head dimension D");
  Tensor heads4 = make({2, 1, 4}, DType::kF32, std::vector<float>(8));
  Tensor table2x4 = make({2, 4}, DType::kF32, std::vector<float>(8));
  has(error_of([&] { head_rms_norm_rotary(heads4, w4, 1e-6f, table2x4, {}, heads4, kCpu); }),
      "sin is empty but the other table is not");
  has(error_of([&] { head_rms_norm_rotary(heads4, w4, 1e-6f, out, out, heads4, kCpu); }),
      "cos = f32[2, 3] cpu: expected f32[2, 4] [T, D] of x");
  has(error_of([&] { head_rms_norm_rotary(heads4, w, 1e-6f, {}, {}, heads4, kCpu); }),
      "weight = f32[3] cpu: expected [4]");
  Tensor table = make({4, 3}, DType::kF32, std::vector<float>(12));
  has(error_of([&] { embedding(x, table, out, kCpu); }), "ids = f32[2, 3] cpu: expected [2]");
  Tensor ids_f = Tensor::empty({2}, DType::kF32, Device::cpu());
  has(error_of([&] { embedding(ids_f, table, out, kCpu); }),
      "ids has dtype f32: expected i32 or i64");
  has(error_of([&] { embedding(ids, table, big, kCpu); }), "out = f32[2, 4] cpu: expected [2, 3]");
  Tensor out3 = Tensor::empty({3}, DType::kI64, Device::cpu());
  has(error_of([&] { argmax(x, out3, kCpu); }), "out = i64[3] cpu: expected [2]");
  // RoPE: positions, inv_freq, shapes.
  Tensor q = make({2, 1, 4}, DType::kF32, std::vector<float>(8));
  Tensor freq2 = make({2}, DType::kF32, {1, 1}), freq3 = make({3}, DType::kF32, {1, 1, 1});
  ids.data_as<int32_t>()[0] = 0;
  ids.data_as<int32_t>()[1] = -5;
  has(error_of([&] { rope(q, ids, freq2, q, kCpu); }), "positions[1] = -5: expected 0 to");
  ids.data_as<int32_t>()[1] = 1;
  has(error_of([&] { rope(q, ids, freq3, q, kCpu); }),
      "inv_freq = f32[3] cpu: expected f32[R/2] with 2 <= R <= D = 4");
  has(error_of([&] { rope(q, out3, freq2, q, kCpu); }), "positions = i64[3] cpu: expected [2]");
  has(error_of([&] { rope(x, ids, freq2, x, kCpu); }),
      "x = f32[2, 3] cpu: expected 3 dims [T, H, D]");
  // A cuda tensor on the cpu stream.
  const TensorView on_gpu(x.data(), DType::kF32, Device::cuda(0), {2, 3});
  has(error_of([&] { gelu_tanh(on_gpu, out, kCpu); }),
      "x = f32[2, 3] cuda:0 is on cuda:0: expected cpu (the stream's device)");
  // N = 0: nothing to do, no error.
  Tensor none = Tensor::empty({0, 3}, DType::kF32, Device::cpu());
  EXPECT_NO_THROW(rms_norm(none, {}, w, 1e-5f, none, kCpu));
}

}  // namespace
}  // namespace tessera::model
