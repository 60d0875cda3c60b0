// FP8 e4m3 (OCP E4M3FN) conversions of core/dtype.h: every one of the 256 codes decoded against
// the format's formula and round-tripped, round-to-nearest-even at every tie between adjacent
// codes, saturation to +-448 (infinities included), NaN, signed zero, and the DType plumbing
// (size, name, parse, load/store, round_to_dtype).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

// The value of an e4m3 code by the format's definition (bias 7, subnormals at exponent 0).
double e4m3_value(int code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, mant = code & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = exp == 0 ? std::ldexp(mant, -9) : std::ldexp(1.0 + mant / 8.0, exp - 7);
  return sign ? -mag : mag;
}

TEST(DTypeFp8, EveryCodeDecodesByTheFormulaAndRoundTrips) {
  int nan_codes = 0;
  for (int code = 0; code < 256; ++code) {
    const float v = fp8_e4m3_bits_to_float(uint8_t(code));
    const double want = e4m3_value(code);
    if (std::isnan(want)) {
      ++nan_codes;
      EXPECT_TRUE(std::isnan(v)) << "code " << code;
      EXPECT_EQ(float_to_fp8_e4m3_bits(v), 0x7f) << "code " << code;
      continue;
    }
    EXPECT_EQ(double(v), want) << "code " << code;
    EXPECT_EQ(std::signbit(v), code >= 128) << "code " << code;  // -0 is 0x80
    EXPECT_EQ(float_to_fp8_e4m3_bits(v), code) << "code " << code;
    EXPECT_EQ(round_to_dtype(DType::kFP8E4M3, v), v) << "code " << code;
  }
  EXPECT_EQ(nan_codes, 2);  // 0x7f and 0xff
  EXPECT_EQ(fp8_e4m3_bits_to_float(0x7e), kFP8E4M3Max);
  EXPECT_EQ(fp8_e4m3_bits_to_float(0xfe), -kFP8E4M3Max);
  EXPECT_EQ(fp8_e4m3_bits_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_bits_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
}

// Between adjacent codes a and a+1 (same sign, both finite): the midpoint goes to the even code,
// anything just below it to a, just above to a+1. Covers subnormal ties, the subnormal/normal
// boundary, exponent carries (1.875 2^e + half a step rounds up to 2^(e+1)), and 416..448.
TEST(DTypeFp8, RoundsToNearestEvenAtEveryTie) {
  for (int sign : {0, 0x80}) {
    for (int a = 0; a < 0x7e; ++a) {
      const int lo = sign | a, hi = sign | (a + 1);
      const float vlo = fp8_e4m3_bits_to_float(uint8_t(lo));
      const float vhi = fp8_e4m3_bits_to_float(uint8_t(hi));
      const float mid = 0.5f * (vlo + vhi);  // exact: 4 significant bits
      ASSERT_EQ(double(mid), 0.5 * (double(vlo) + double(vhi)));
      const int even = (a & 1) ? hi : lo;
      EXPECT_EQ(float_to_fp8_e4m3_bits(mid), even) << "tie between codes " << lo << ", " << hi;
      EXPECT_EQ(float_to_fp8_e4m3_bits(std::nextafter(mid, vlo)), lo) << "below tie " << lo;
      EXPECT_EQ(float_to_fp8_e4m3_bits(std::nextafter(mid, vhi)), hi) << "above tie " << lo;
    }
  }
  // Examples worth naming: 1 + 1/16 is a tie between 1 (0x38, even) and 1.125 (0x39).
  EXPECT_EQ(float_to_fp8_e4m3_bits(1.0625f), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3_bits(1.1875f), 0x3a);                 // 1.125 (odd) / 1.25: to 1.25
  EXPECT_EQ(float_to_fp8_e4m3_bits(std::ldexp(3.0f, -10)), 0x02);   // 1.5 2^-9: 0x01 odd, 0x02
  EXPECT_EQ(float_to_fp8_e4m3_bits(std::ldexp(1.0f, -10)), 0x00);   // half the smallest: 0
  EXPECT_EQ(float_to_fp8_e4m3_bits(-std::ldexp(1.0f, -10)), 0x80);  // keeps the sign
  EXPECT_EQ(float_to_fp8_e4m3_bits(std::ldexp(1.0f, -30)), 0x00);
}

TEST(DTypeFp8, SaturatesToMaxAndMapsNanToNan) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float big : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e6f, 3.4e38f, inf}) {
    EXPECT_EQ(float_to_fp8_e4m3_bits(big), 0x7e) << big;
    EXPECT_EQ(float_to_fp8_e4m3_bits(-big), 0xfe) << -big;
    EXPECT_EQ(round_to_dtype(DType::kFP8E4M3, big), 448.0f) << big;
  }
  EXPECT_EQ(float_to_fp8_e4m3_bits(432.0f), 0x7e);  // tie 416 | 448: 448 (0x7e) is even
  EXPECT_EQ(float_to_fp8_e4m3_bits(431.0f), 0x7d);
  EXPECT_EQ(float_to_fp8_e4m3_bits(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3_bits(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_TRUE(std::isnan(round_to_dtype(DType::kFP8E4M3, NAN)));
  EXPECT_EQ(float_to_fp8_e4m3_bits(0.0f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3_bits(-0.0f), 0x80);
}

// Every float in a dense sweep rounds to a nearest code (no code is closer), ties aside.
TEST(DTypeFp8, EveryRoundingIsToANearestCode) {
  for (float x = -500.0f; x <= 500.0f; x += 0.0371f) {
    const uint8_t c = float_to_fp8_e4m3_bits(x);
    const double got = fp8_e4m3_bits_to_float(c);
    const double want = std::max(-448.0, std::min(448.0, double(x)));
    const double err = std::abs(got - want);
    for (int code = 0; code < 256; ++code) {
      const double other = e4m3_value(code);
      if (std::isnan(other)) continue;
      ASSERT_LE(err, std::abs(other - want))
          << "x " << x << " -> code " << int(c) << " but code " << code << " is closer";
    }
    // Half a step: 2^-4 relative for normals, 2^-10 absolute below 2^-6.
    EXPECT_LE(err, std::max(std::abs(want) / 16, std::ldexp(1.0, -10))) << x;
  }
}

TEST(DTypeFp8, DTypePlumbing) {
  EXPECT_EQ(dtype_size(DType::kFP8E4M3), 1u);
  EXPECT_STREQ(dtype_name(DType::kFP8E4M3), "fp8_e4m3");
  EXPECT_EQ(parse_dtype("fp8_e4m3"), DType::kFP8E4M3);
  EXPECT_EQ(parse_dtype("e4m3"), DType::kFP8E4M3);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kFP8E4M3);
  try {
    parse_dtype("fp8", "--dtype");
    FAIL() << "fp8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype = 'fp8'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp8_e4m3"), std::string::npos) << e.what();
  }
  uint8_t buf[4] = {0, 0, 0, 0};
  store_from_float(buf, DType::kFP8E4M3, 1, -3.3f);  // -3.25 (0xc5) is nearer than -3.5
  store_from_float(buf, DType::kFP8E4M3, 2, 1000.0f);
  EXPECT_EQ(buf[0], 0);
  EXPECT_EQ(buf[1], 0xc5);
  EXPECT_EQ(buf[2], 0x7e);
  EXPECT_EQ(buf[3], 0);
  EXPECT_EQ(load_as_float(buf, DType::kFP8E4M3, 1), -3.25f);
  EXPECT_EQ(load_as_float(buf, DType::kFP8E4M3, 2), 448.0f);
}

}  // namespace
}  // namespace tessera
