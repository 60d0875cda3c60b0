// Element types Tessera moves and computes on, and host-side bf16/fp16 conversion (the cpu
// backend and the tests convert with these; kernels use the CUDA types).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16, kU8, kI32, kI64, kU64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses "f32|float32|fp32", "f16|float16|fp16", "bf16|bfloat16", "u8", "i32", "i64", "u64".
// Throws kInvalidArgument naming `what` for anything else.
DType parse_dtype(std::string_view text, std::string_view what = "dtype");

// Round-to-nearest-even conversions; NaN stays NaN.
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);
uint16_t float_to_fp16_bits(float value);
float fp16_bits_to_float(uint16_t bits);
// `value` rounded to bf16 or f16 (nearest even) and back; other dtypes return it unchanged.
float round_to_dtype(DType dtype, float value);

// Reads element `index` of a buffer of `dtype` as float / writes a float into it.
float load_as_float(const void* data, DType dtype, int64_t index);
void store_from_float(void* data, DType dtype, int64_t index, float value);

}  // namespace tessera
