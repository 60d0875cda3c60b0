// TensorView: a non-owning, strided view of memory on a device. Shapes and strides are in
// elements. Layout comments in Tessera read outermost first, e.g. [B, L, H, D].
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tessera/core/dtype.h"

namespace tessera {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // CUDA ordinal; 0 for cpu

  static Device cpu() { return {DeviceKind::kCpu, 0}; }
  static Device cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;
};

class TensorView {
 public:
  static constexpr int kMaxDims = 6;

  TensorView() = default;
  // A contiguous (row-major) view.
  TensorView(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
  // An arbitrary strided view; ndim = shape.size() = strides.size().
  TensorView(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides);
  static TensorView contiguous(void* data, DType dtype, Device device, const int64_t* shape,
                               int ndim);

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t size(int dim) const;
  int64_t stride(int dim) const;
  int64_t numel() const;
  size_t element_size() const { return dtype_size(dtype_); }
  // Bytes spanned from data() to one past the last element (== numel*elem for contiguous).
  size_t span_bytes() const;
  bool is_contiguous() const;
  bool empty() const { return data_ == nullptr; }

  // A view of [start, start+length) along `dim`; same strides.
  TensorView slice(int dim, int64_t start, int64_t length) const;
  // A contiguous 1-D view of `count` elements starting at element `offset` (contiguous only).
  TensorView flat(int64_t offset, int64_t count) const;

  std::string to_string() const;  // "bf16[2, 128, 24, 64] cuda:0"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_{};
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
};

// Argument checks shared by every public entry that takes tensors. `what` names the
// argument in the error message.
void check_contiguous(const TensorView& t, const char* what);
void check_device(const TensorView& t, Device expected, const char* what);
void check_dtype(const TensorView& t, DType expected, const char* what);
void check_min_bytes(const TensorView& t, size_t bytes, const char* what);

}  // namespace tessera
