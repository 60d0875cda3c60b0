#include "tessera/core/dtype.h"

#include <limits>

#include "tessera/core/error.h"

namespace tessera {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU64: return 8;
    case DType::kFP8E4M3: return 1;
  }
  throw_error(ErrorCode::kInternal, "unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU64: return "u64";
    case DType::kFP8E4M3: return "fp8_e4m3";
  }
  return "?";
}

DType parse_dtype(std::string_view text, std::string_view what) {
  if (text == "f32" || text == "fp32" || text == "float32" || text == "float") return DType::kF32;
  if (text == "f16" || text == "fp16" || text == "float16" || text == "half") return DType::kF16;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "u8" || text == "uint8") return DType::kU8;
  if (text == "i32" || text == "int32") return DType::kI32;
  if (text == "i64" || text == "int64") return DType::kI64;
  if (text == "u64" || text == "uint64") return DType::kU64;
  if (text == "fp8_e4m3" || text == "e4m3" || text == "float8_e4m3fn") return DType::kFP8E4M3;
  throw_error(
      ErrorCode::kInvalidArgument,
      str(what, " = '", text, "': expected one of f32, f16, bf16, u8, i32, i64, u64, fp8_e4m3"));
}

static uint32_t float_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
static float bits_float(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

uint16_t float_to_bf16_bits(float value) {
  uint32_t u = float_bits(value);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return uint16_t((u + rounding) >> 16);
}

float bf16_bits_to_float(uint16_t bits) { return bits_float(uint32_t(bits) << 16); }

uint16_t float_to_fp16_bits(float value) {
  uint32_t u = float_bits(value);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {                                  // subnormal or zero in fp16
    // value * 2^24 rounded to nearest even is the subnormal mantissa.
    float scaled = bits_float(abs) * 16777216.0f;
    uint32_t m = uint32_t(scaled);
    float frac = scaled - float(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return uint16_t(sign | m);
  }
  uint32_t mant = abs & 0x007fffffu;
  uint32_t exp = (abs >> 23) - 127 + 15;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return uint16_t(sign | half);
}

float fp16_bits_to_float(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    float v = float(mant) / 16777216.0f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint8_t float_to_fp8_e4m3_bits(float value) {
  const uint32_t u = float_bits(value);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7f;                     // NaN
  if (bits_float(abs) > kFP8E4M3Max) return sign | 0x7e;  // saturate, infinities included
  if (abs < 0x3c800000u) {  // below 2^-6, the smallest normal: a multiple of 2^-9
    // |value| * 2^9 rounded to nearest even is the subnormal mantissa (8 gives 2^-6, 0x08).
    const float scaled = bits_float(abs) * 512.0f;  // exact: a power-of-two scale
    uint32_t m = uint32_t(scaled);
    const float frac = scaled - float(m);
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return uint8_t(sign | m);
  }
  // Normal: keep 3 of the 23 mantissa bits, round the other 20 to nearest even; a carry moves
  // into the exponent as it should. |value| <= 448 keeps the result <= 0x7e.
  const uint32_t exp = (abs >> 23) - 127 + 7;
  const uint32_t mant = abs & 0x007fffffu;
  uint32_t code = (exp << 3) | (mant >> 20);
  const uint32_t rest = mant & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;
  return uint8_t(sign | code);
}

float fp8_e4m3_bits_to_float(uint8_t bits) {
  const uint32_t exp = (bits >> 3) & 0xfu;
  const uint32_t mant = bits & 0x7u;
  float v;
  if (exp == 0xf && mant == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = float(mant) / 512.0f;
  } else {
    v = bits_float(((exp - 7 + 127) << 23) | (mant << 20));
  }
  return (bits & 0x80u) ? -v : v;
}

float round_to_dtype(DType dtype, float value) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_bits_to_float(float_to_bf16_bits(value));
    case DType::kF16:
      return fp16_bits_to_float(float_to_fp16_bits(value));
    case DType::kFP8E4M3:
      return fp8_e4m3_bits_to_float(float_to_fp8_e4m3_bits(value));
    default:
      return value;
  }
}

float load_as_float(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[index];
    case DType::kF16: return fp16_bits_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16: return bf16_bits_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::kU8: return float(static_cast<const uint8_t*>(data)[index]);
    case DType::kI32: return float(static_cast<const int32_t*>(data)[index]);
    case DType::kI64: return float(static_cast<const int64_t*>(data)[index]);
    case DType::kU64: return float(static_cast<const uint64_t*>(data)[index]);
    case DType::kFP8E4M3: return fp8_e4m3_bits_to_float(static_cast<const uint8_t*>(data)[index]);
  }
  return 0.0f;
}

void store_from_float(void* data, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(data)[index] = value; return;
    case DType::kF16: static_cast<uint16_t*>(data)[index] = float_to_fp16_bits(value); return;
    case DType::kBF16: static_cast<uint16_t*>(data)[index] = float_to_bf16_bits(value); return;
    case DType::kU8: static_cast<uint8_t*>(data)[index] = uint8_t(value); return;
    case DType::kI32: static_cast<int32_t*>(data)[index] = int32_t(value); return;
    case DType::kI64: static_cast<int64_t*>(data)[index] = int64_t(value); return;
    case DType::kU64: static_cast<uint64_t*>(data)[index] = uint64_t(value); return;
    case DType::kFP8E4M3: static_cast<uint8_t*>(data)[index] = float_to_fp8_e4m3_bits(value);
      return;
  }
}

}  // namespace tessera
