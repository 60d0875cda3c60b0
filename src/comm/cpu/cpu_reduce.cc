// Element-wise reduction over ranks for the cpu communicator (see cpu_reduce.h).
#include "comm/cpu/cpu_reduce.h"

#include <cmath>
#include <type_traits>

#include "tessera/core/error.h"

namespace tessera::cpu {

namespace {

float combine_float(float acc, float x, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return acc + x;
    case ReduceOp::kMax:
      if (std::isnan(acc)) return acc;
      return (std::isnan(x) || x > acc) ? x : acc;
    case ReduceOp::kMin:
      if (std::isnan(acc)) return acc;
      return (std::isnan(x) || x < acc) ? x : acc;
  }
  return acc;
}

template <typename T>
T combine_int(T acc, T x, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
      return T(U(acc) + U(x));  // wraps instead of signed overflow
    case ReduceOp::kMax:
      return x > acc ? x : acc;
    case ReduceOp::kMin:
      return x < acc ? x : acc;
  }
  return acc;
}

template <typename T>
void reduce_int(T* out, const std::vector<const void*>& inputs, int64_t count, ReduceOp op) {
  const T* first = static_cast<const T*>(inputs[0]);
  if (out != first) {
    for (int64_t i = 0; i < count; ++i) out[i] = first[i];
  }
  for (size_t r = 1; r < inputs.size(); ++r) {
    const T* in = static_cast<const T*>(inputs[r]);
    for (int64_t i = 0; i < count; ++i) out[i] = combine_int(out[i], in[i], op);
  }
}

void reduce_f32(float* out, const std::vector<const void*>& inputs, int64_t count, ReduceOp op) {
  const float* first = static_cast<const float*>(inputs[0]);
  if (out != first) {
    for (int64_t i = 0; i < count; ++i) out[i] = first[i];
  }
  for (size_t r = 1; r < inputs.size(); ++r) {
    const float* in = static_cast<const float*>(inputs[r]);
    for (int64_t i = 0; i < count; ++i) out[i] = combine_float(out[i], in[i], op);
  }
}

// f16 / bf16: accumulate in float, round once.
void reduce_half(uint16_t* out, const std::vector<const void*>& inputs, int64_t count, DType dtype,
                 ReduceOp op) {
  auto to_float = dtype == DType::kF16 ? fp16_bits_to_float : bf16_bits_to_float;
  auto to_bits = dtype == DType::kF16 ? float_to_fp16_bits : float_to_bf16_bits;
  std::vector<float> acc(static_cast<size_t>(count));
  const uint16_t* first = static_cast<const uint16_t*>(inputs[0]);
  for (int64_t i = 0; i < count; ++i) acc[i] = to_float(first[i]);
  for (size_t r = 1; r < inputs.size(); ++r) {
    const uint16_t* in = static_cast<const uint16_t*>(inputs[r]);
    for (int64_t i = 0; i < count; ++i) acc[i] = combine_float(acc[i], to_float(in[i]), op);
  }
  for (int64_t i = 0; i < count; ++i) out[i] = to_bits(acc[i]);
}

}  // namespace

bool is_reducible(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kI64:
    case DType::kU64:
      return true;
    case DType::kU8:
    case DType::kFP8E4M3:
      return false;
  }
  return false;
}

void reduce_into(void* out, const std::vector<const void*>& inputs, int64_t count, DType dtype,
                 ReduceOp op) {
  TESSERA_CHECK(!inputs.empty(), ErrorCode::kInternal, "reduce_into: no inputs");
  if (count == 0) return;
  switch (dtype) {
    case DType::kF32:
      return reduce_f32(static_cast<float*>(out), inputs, count, op);
    case DType::kF16:
    case DType::kBF16:
      return reduce_half(static_cast<uint16_t*>(out), inputs, count, dtype, op);
    case DType::kI32:
      return reduce_int(static_cast<int32_t*>(out), inputs, count, op);
    case DType::kI64:
      return reduce_int(static_cast<int64_t*>(out), inputs, count, op);
    case DType::kU64:
      return reduce_int(static_cast<uint64_t*>(out), inputs, count, op);
    case DType::kU8:
    case DType::kFP8E4M3:
      break;
  }
  throw_error(ErrorCode::kUnsupported, str("reduction of dtype ", dtype_name(dtype),
                                           ": expected f32, f16, bf16, i32, i64 or u64"));
}

}  // namespace tessera::cpu
