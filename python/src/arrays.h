// Arrays across the Python boundary. Any DLPack producer (NumPy, PyTorch, CuPy, JAX) arrives
// as an nb::ndarray and leaves as a TensorView, after checks whose messages name the argument
// and what was expected. Outputs Tessera allocates itself are NumPy arrays (cpu only: on cuda
// the caller passes `out`, so no framework's allocator is linked here); the Python layer hands
// them back in the caller's framework (tessera/_frameworks.py: torch in, torch out).
//
// dtypes: float32, float16 and bfloat16 (DLPack's bfloat code: torch, JAX). NumPy has no
// bfloat16, so a uint16 array is read as bfloat16 bit patterns, and bfloat16 outputs Tessera
// allocates are uint16 arrays of bit patterns; FP8 (e4m3) likewise as uint8 (fp8_view).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"

namespace tessera::python {

using InArray = nanobind::ndarray<nanobind::ro>;  // read-only arrays are fine as inputs
using OutArray = nanobind::ndarray<>;
using NumpyArray = nanobind::ndarray<nanobind::numpy>;

// The DLPack fields of any ndarray, so inputs and outputs share one set of checks.
struct ArrayFields {
  const void* data = nullptr;
  nanobind::dlpack::dtype dtype;
  int device_type = 0;
  int device_id = 0;
  int ndim = 0;
  const int64_t* shape = nullptr;
  const int64_t* strides = nullptr;  // in elements
};

template <typename... Ts>
ArrayFields fields_of(const nanobind::ndarray<Ts...>& a) {
  return {a.data(),      a.dtype(),     a.device_type(), a.device_id(),
          int(a.ndim()), a.shape_ptr(), a.stride_ptr()};
}

// What an argument must look like: its name and layout for messages ("q", "[B, L, H, D]").
struct ArgSpec {
  const char* name;
  const char* layout;
  int ndim;
  bool output = false;  // outputs may not be broadcast (stride 0) views
};

// A TensorView of `a` after checking dtype, device, rank and strides (unit stride in the last
// dimension, none negative). Throws tessera::Error(kInvalidArgument) naming spec.name.
TensorView checked_view(const ArrayFields& a, const ArgSpec& spec);
template <typename... Ts>
TensorView checked_view(const nanobind::ndarray<Ts...>& a, const ArgSpec& spec) {
  return checked_view(fields_of(a), spec);
}

// A TensorView of fp8_e4m3 elements: DLPack's float8_e4m3fn (torch) or uint8 (their bit
// patterns: NumPy has no FP8), after the same rank and stride checks; any other dtype throws
// naming spec.name.
TensorView fp8_view(const ArrayFields& a, const ArgSpec& spec);
template <typename... Ts>
TensorView fp8_view(const nanobind::ndarray<Ts...>& a, const ArgSpec& spec) {
  return fp8_view(fields_of(a), spec);
}

// A TensorView of an int32 array (positions, page tables) after the same rank and stride
// checks; any other dtype throws naming spec.name.
TensorView index_view(const ArrayFields& a, const ArgSpec& spec);
template <typename... Ts>
TensorView index_view(const nanobind::ndarray<Ts...>& a, const ArgSpec& spec) {
  return index_view(fields_of(a), spec);
}
// A contiguous array of any dtype as bytes (u8 [size in bytes]): scratch memory.
TensorView bytes_view(const ArrayFields& a, const char* name);
template <typename... Ts>
TensorView bytes_view(const nanobind::ndarray<Ts...>& a, const char* name) {
  return bytes_view(fields_of(a), name);
}

// Whether the array holds bfloat16 as uint16 bit patterns (NumPy's form of bfloat16).
bool is_bf16_bits(const ArrayFields& a);

// Throws unless `t` lies on the device of `other` (every tensor of a call shares one device).
void check_same_device(const TensorView& t, const char* name, const TensorView& other,
                       const char* other_name);
// Throws unless `t` has exactly `shape`; `expected` describes it ("[B=2, Lq=5, Hq=8, D=16]").
void check_shape(const TensorView& t, const char* name, const std::vector<int64_t>& shape,
                 const std::string& expected);

// An array argument given as a Python object (so that None can be told apart from it); any
// other object throws naming `name`. Outputs (OutArray) must be writable.
template <typename Array>
Array array_argument(const nanobind::handle& object, const char* name) {
  Array a;
  constexpr bool writable = std::is_same_v<Array, OutArray>;
  TESSERA_CHECK_ARG(nanobind::try_cast(object, a, /*convert=*/false), name, ": a ",
                    Py_TYPE(object.ptr())->tp_name,
                    writable ? " object (read-only, or no array): expected a writable array (NumPy "
                               "or any DLPack producer)"
                             : " object: expected an array (NumPy or any DLPack producer)");
  return a;
}

// An output argument as every call takes it. None: a new NumPy array of `dtype` and `shape`
// (on the cpu only; on a GPU the caller's framework allocates, tessera/_frameworks.py). Else
// the caller's writable array, checked against `spec` (rank, strides), `like`'s device,
// `shape` and `dtype`; `expected_shape` and `dtype_owner` say where those come from in the
// messages ("q's shape [1, 6, 4, 8]", "q's"). `view` is what the call writes.
struct Output {
  nanobind::object object;  // what the call hands back
  TensorView view;
};
Output output_argument(const nanobind::object& out, const ArgSpec& spec, const TensorView& like,
                       const char* like_name, const std::vector<int64_t>& shape, DType dtype,
                       const std::string& expected_shape, const char* dtype_owner);

// A new zero-filled NumPy array; bfloat16 becomes uint16 bit patterns, fp8_e4m3 uint8 ones.
NumpyArray new_numpy_array(DType dtype, const std::vector<int64_t>& shape);
// The Tessera view of an array new_numpy_array made (contiguous, cpu).
TensorView view_of(const NumpyArray& a, DType dtype);

// The stream a call runs on: cpu tensors take no stream (handle 0); cuda tensors take a
// cudaStream_t as an integer handle (0: the legacy default stream).
Stream stream_for(uint64_t handle, Device device);

// "[2, 5, 8, 16]"
std::string shape_string(const TensorView& t);

// A dtype argument as Python spells it ("bfloat16", "bf16", np.float32, np.dtype("float16"),
// torch.bfloat16) -> float32, float16 or bfloat16; anything else throws naming `what`.
DType dtype_argument(const nanobind::handle& dtype, const char* what);

}  // namespace tessera::python
