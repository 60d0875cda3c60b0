// Element types Tessera moves and computes on, and host-side bf16/fp16 conversion (the cpu
// backend and the tests convert with these; kernels use the CUDA types).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

// kFP8E4M3 is OCP E4M3FN, Hopper's e4m3 (see float_to_fp8_e4m3_bits).
enum class DType : uint8_t { kF32, kF16, kBF16, kU8, kI32, kI64, kU64, kFP8E4M3 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses "f32|float32|fp32", "f16|float16|fp16", "bf16|bfloat16", "u8", "i32", "i64", "u64",
// "fp8_e4m3|e4m3|float8_e4m3fn".
// Throws kInvalidArgument naming `what` for anything else.
DType parse_dtype(std::string_view text, std::string_view what = "dtype");

// Round-to-nearest-even conversions; NaN stays NaN.
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_fp16_bits(float value);
float fp16_bits_to_float(uint16_t bits);
// FP8 e4m3 as on Hopper (OCP E4M3FN, torch.float8_e4m3fn): 1 sign, 4 exponent bits (bias 7),
// 3 mantissa bits. Normals (1 + m/8) 2^(e-7) for e in 1..15, subnormals m 2^-9 for e = 0, so
// the step is 2^-3 relative (half a step, 2^-4, is the rounding error of a normal) and the
// largest finite value is 448 (S.1111.110). No infinities: S.1111.111 (0x7f, 0xff) is NaN.
// float -> e4m3 rounds to nearest even and saturates: anything above 448 in magnitude,
// infinities included, gives +-448 (cuda's __NV_SATFINITE); NaN gives 0x7f; the sign of zero
// is kept. e4m3 -> float is exact.
inline constexpr float kFP8E4M3Max = 448.0f;
uint8_t float_to_fp8_e4m3_bits(float value);
float fp8_e4m3_bits_to_float(uint8_t bits);
// `value` rounded to bf16, f16 or fp8_e4m3 (nearest even; e4m3 saturating) and back; other
// dtypes return it unchanged.
float round_to_dtype(DType dtype, float value);

// Reads element `index` of a buffer of `dtype` as float / writes a float into it.
float load_as_float(const void* data, DType dtype, int64_t index);
void store_from_float(void* data, DType dtype, int64_t index, float value);

}  // namespace tessera
