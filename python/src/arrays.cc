#include "arrays.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <new>

#include "tessera/core/error.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

std::string dlpack_dtype_name(const nb::dlpack::dtype& d) {
  const char* kind = "dtype code ";
  switch (nb::dlpack::dtype_code(d.code)) {
    case nb::dlpack::dtype_code::Int:
      kind = "int";
      break;
    case nb::dlpack::dtype_code::UInt:
      kind = "uint";
      break;
    case nb::dlpack::dtype_code::Float:
      kind = "float";
      break;
    case nb::dlpack::dtype_code::Bfloat:
      kind = "bfloat";
      break;
    case nb::dlpack::dtype_code::Complex:
      kind = "complex";
      break;
    case nb::dlpack::dtype_code::Bool:
      kind = "bool";
      break;
    default:
      return str("dtype code ", int(d.code), " bits ", int(d.bits));
  }
  std::string name = str(kind, int(d.bits));
  if (d.lanes != 1) name += str("x", d.lanes);
  return name;
}

std::string dims_string(int ndim, const int64_t* shape) {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += str(i ? ", " : "", shape[i]);
  return s + "]";
}

DType tessera_dtype(const ArrayFields& a, const char* name) {
  const nb::dlpack::dtype d = a.dtype;
  if (d.lanes == 1) {
    if (d.code == uint8_t(nb::dlpack::dtype_code::Float) && d.bits == 32) return DType::kF32;
    if (d.code == uint8_t(nb::dlpack::dtype_code::Float) && d.bits == 16) return DType::kF16;
    if (d.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) return DType::kBF16;
    if (is_bf16_bits(a)) return DType::kBF16;
  }
  throw_error(ErrorCode::kInvalidArgument,
              str(name, ": dtype ", dlpack_dtype_name(d),
                  ": expected float32, float16 or bfloat16 (NumPy: bfloat16 as its uint16 bit "
                  "pattern)"));
}

Device tessera_device(const ArrayFields& a, const char* name) {
  if (a.device_type == nb::device::cpu::value) return Device::cpu();
  if (a.device_type == nb::device::cuda::value) return Device::cuda(a.device_id);
  throw_error(ErrorCode::kInvalidArgument,
              str(name, ": on DLPack device type ", a.device_type, " (id ", a.device_id,
                  "): expected cpu or cuda memory"));
}

// "float32", np.float32, np.dtype("float32"), torch.float32 -> "float32".
std::string dtype_text(const nb::handle& dtype) {
  if (nb::isinstance<nb::str>(dtype)) return nb::cast<std::string>(dtype);
  for (const char* attr : {"name", "__name__"}) {
    if (nb::hasattr(dtype, attr)) {
      nb::object name = nb::getattr(dtype, attr);
      if (nb::isinstance<nb::str>(name)) return nb::cast<std::string>(name);
    }
  }
  std::string text = nb::cast<std::string>(nb::str(dtype));
  if (text.rfind("torch.", 0) == 0) text = text.substr(6);
  return text;
}

}  // namespace

DType dtype_argument(const nb::handle& dtype, const char* what) {
  const std::string text = dtype_text(dtype);
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (text == dtype_name(d)) return d;
  }
  if (text == "float32" || text == "fp32") return DType::kF32;
  if (text == "float16" || text == "fp16" || text == "half") return DType::kF16;
  if (text == "bfloat16") return DType::kBF16;
  throw_error(ErrorCode::kInvalidArgument,
              str(what, " = '", text, "': expected float32, float16 or bfloat16"));
}

bool is_bf16_bits(const ArrayFields& a) {
  return a.dtype.code == uint8_t(nb::dlpack::dtype_code::UInt) && a.dtype.bits == 16 &&
         a.dtype.lanes == 1;
}

namespace {

// `a` as a TensorView of `dtype` after the rank and stride checks every argument gets.
TensorView strided_view(const ArrayFields& a, const ArgSpec& spec, DType dtype) {
  const Device device = tessera_device(a, spec.name);
  TESSERA_CHECK_ARG(a.ndim == spec.ndim, spec.name, ": ", a.ndim, " dimensions ",
                    dims_string(a.ndim, a.shape), ": expected ", spec.ndim, " ", spec.layout);
  for (int i = 0; i < a.ndim; ++i) {
    TESSERA_CHECK_ARG(a.strides[i] >= 0, spec.name, ": stride ", a.strides[i], " in dimension ", i,
                      " of ", spec.layout, ": expected strides >= 0 (no reversed views)");
    TESSERA_CHECK_ARG(!spec.output || a.strides[i] > 0 || a.shape[i] <= 1, spec.name,
                      ": stride 0 in dimension ", i, " of ", spec.layout,
                      " (a broadcast view): expected an output whose elements are distinct");
  }
  const int last = a.ndim - 1;
  TESSERA_CHECK_ARG(last < 0 || a.strides[last] == 1 || a.shape[last] <= 1, spec.name,
                    ": not contiguous in its last dimension (stride ", a.strides[last], " of ",
                    spec.layout, " ", dims_string(a.ndim, a.shape),
                    "): expected stride 1 there (other dimensions may have any stride)");
  switch (a.ndim) {
    case 1:
      return TensorView(const_cast<void*>(a.data), dtype, device, {a.shape[0]}, {a.strides[0]});
    case 2:
      return TensorView(const_cast<void*>(a.data), dtype, device, {a.shape[0], a.shape[1]},
                        {a.strides[0], a.strides[1]});
    case 4:
      return TensorView(const_cast<void*>(a.data), dtype, device,
                        {a.shape[0], a.shape[1], a.shape[2], a.shape[3]},
                        {a.strides[0], a.strides[1], a.strides[2], a.strides[3]});
    case 3:
      return TensorView(const_cast<void*>(a.data), dtype, device,
                        {a.shape[0], a.shape[1], a.shape[2]},
                        {a.strides[0], a.strides[1], a.strides[2]});
    default:
      throw_error(ErrorCode::kInternal,
                  str("checked_view: ", a.ndim, " dimensions are not bound yet"));
  }
}

}  // namespace

TensorView checked_view(const ArrayFields& a, const ArgSpec& spec) {
  return strided_view(a, spec, tessera_dtype(a, spec.name));
}

TensorView fp8_view(const ArrayFields& a, const ArgSpec& spec) {
  // DLPack 1.1's kDLFloat8_e4m3fn (torch.float8_e4m3fn), which nanobind's enum does not name.
  constexpr uint8_t kFloat8E4m3fn = 10;
  const bool bits = a.dtype.code == uint8_t(nb::dlpack::dtype_code::UInt);
  TESSERA_CHECK_ARG(
      (bits || a.dtype.code == kFloat8E4m3fn) && a.dtype.bits == 8 && a.dtype.lanes == 1, spec.name,
      ": dtype ", dlpack_dtype_name(a.dtype),
      ": expected float8_e4m3fn (or uint8 holding its bit patterns)");
  return strided_view(a, spec, DType::kFP8E4M3);
}

TensorView index_view(const ArrayFields& a, const ArgSpec& spec) {
  TESSERA_CHECK_ARG(a.dtype.code == uint8_t(nb::dlpack::dtype_code::Int) && a.dtype.bits == 32 &&
                        a.dtype.lanes == 1,
                    spec.name, ": dtype ", dlpack_dtype_name(a.dtype), ": expected int32");
  return strided_view(a, spec, DType::kI32);
}

TensorView bytes_view(const ArrayFields& a, const char* name) {
  const Device device = tessera_device(a, name);
  int64_t count = 1, expected_stride = 1;
  bool contiguous = true;
  for (int i = a.ndim - 1; i >= 0; --i) {
    contiguous = contiguous && (a.shape[i] <= 1 || a.strides[i] == expected_stride);
    expected_stride *= a.shape[i];
    count *= a.shape[i];
  }
  TESSERA_CHECK_ARG(contiguous, name, ": ", dims_string(a.ndim, a.shape),
                    " not contiguous: expected a contiguous array");
  const int64_t bytes = count * ((int64_t(a.dtype.bits) * a.dtype.lanes + 7) / 8);
  return TensorView(const_cast<void*>(a.data), DType::kU8, device, {bytes}, {1});
}

void check_same_device(const TensorView& t, const char* name, const TensorView& other,
                       const char* other_name) {
  TESSERA_CHECK_ARG(t.device() == other.device(), name, ": on ", t.device().to_string(),
                    ": expected ", other.device().to_string(), " like ", other_name,
                    " (every tensor of a call on one device)");
}

void check_shape(const TensorView& t, const char* name, const std::vector<int64_t>& shape,
                 const std::string& expected) {
  bool same = t.ndim() == int(shape.size());
  for (int i = 0; same && i < t.ndim(); ++i) same = t.size(i) == shape[size_t(i)];
  TESSERA_CHECK_ARG(same, name, ": shape ", shape_string(t), ": expected ", expected);
}

NumpyArray new_numpy_array(DType dtype, const std::vector<int64_t>& shape) {
  size_t numel = 1;
  std::vector<size_t> dims;
  for (int64_t s : shape) {
    dims.push_back(size_t(s));
    numel *= size_t(s);
  }
  const size_t bytes = numel * dtype_size(dtype);
  void* data = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(64));
  std::memset(data, 0, bytes);
  nb::capsule owner(data, [](void* p) noexcept { ::operator delete(p, std::align_val_t(64)); });
  nb::dlpack::dtype dt = nb::dtype<float>();
  if (dtype == DType::kF16) dt = {uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
  if (dtype == DType::kBF16) dt = nb::dtype<uint16_t>();  // bit patterns: NumPy has no bf16
  if (dtype == DType::kFP8E4M3 || dtype == DType::kU8) dt = nb::dtype<uint8_t>();  // likewise
  return NumpyArray(data, dims.size(), dims.data(), owner, nullptr, dt, nb::device::cpu::value);
}

Output output_argument(const nb::object& out, const ArgSpec& spec, const TensorView& like,
                       const char* like_name, const std::vector<int64_t>& shape, DType dtype,
                       const std::string& expected_shape, const char* dtype_owner) {
  if (out.is_none()) {
    TESSERA_CHECK_ARG(!like.device().is_cuda(), spec.name, ": None with ", like_name, " on ",
                      like.device().to_string(),
                      ": expected an output array (Tessera allocates cpu arrays only)");
    NumpyArray fresh = new_numpy_array(dtype, shape);
    return {nb::cast(fresh), view_of(fresh, dtype)};
  }
  const TensorView view = checked_view(array_argument<OutArray>(out, spec.name), spec);
  check_same_device(view, spec.name, like, like_name);
  check_shape(view, spec.name, shape, expected_shape);
  TESSERA_CHECK_ARG(view.dtype() == dtype, spec.name, ": dtype ", dtype_name(view.dtype()),
                    ": expected ", dtype_owner, " ", dtype_name(dtype));
  return {out, view};
}

TensorView view_of(const NumpyArray& a, DType dtype) {
  std::vector<int64_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = int64_t(a.shape(i));
  return TensorView::contiguous(a.data(), dtype, Device::cpu(), shape.data(), int(shape.size()));
}

Stream stream_for(uint64_t handle, Device device) {
  if (!device.is_cuda()) {
    TESSERA_CHECK_ARG(handle == 0, "stream = ", handle,
                      ": the tensors are on the cpu, whose backend runs inline: expected 0");
    return Stream::cpu();
  }
  return Stream::wrap_cuda(reinterpret_cast<void*>(static_cast<uintptr_t>(handle)), device.index);
}

std::string shape_string(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim(); ++i) s += str(i ? ", " : "", t.size(i));
  return s + "]";
}

}  // namespace tessera::python
