#include "tessera/core/tensor_view.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera {

std::string Device::to_string() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : str("cuda:", index);
}

TensorView::TensorView(void* data, DType dtype, Device device,
                       std::initializer_list<int64_t> shape)
    : data_(data), dtype_(dtype), device_(device) {
  TESSERA_CHECK_ARG(shape.size() <= size_t(kMaxDims), "TensorView shape has ", shape.size(),
                    " dims; at most ", kMaxDims, " supported");
  ndim_ = int(shape.size());
  std::copy(shape.begin(), shape.end(), shape_.begin());
  int64_t stride = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    TESSERA_CHECK_ARG(shape_[d] >= 0, "TensorView shape[", d, "] = ", shape_[d],
                      ": expected >= 0");
    strides_[d] = stride;
    stride *= shape_[d];
  }
}

TensorView::TensorView(void* data, DType dtype, Device device,
                       std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> strides)
    : data_(data), dtype_(dtype), device_(device) {
  TESSERA_CHECK_ARG(shape.size() == strides.size(), "TensorView: shape has ", shape.size(),
                    " dims but strides has ", strides.size());
  TESSERA_CHECK_ARG(shape.size() <= size_t(kMaxDims), "TensorView shape has ", shape.size(),
                    " dims; at most ", kMaxDims, " supported");
  ndim_ = int(shape.size());
  std::copy(shape.begin(), shape.end(), shape_.begin());
  std::copy(strides.begin(), strides.end(), strides_.begin());
  for (int d = 0; d < ndim_; ++d) {
    TESSERA_CHECK_ARG(shape_[d] >= 0 && strides_[d] >= 0, "TensorView dim ", d, ": shape ",
                      shape_[d], ", stride ", strides_[d], ": expected both >= 0");
  }
}

TensorView TensorView::contiguous(void* data, DType dtype, Device device, const int64_t* shape,
                                  int ndim) {
  TESSERA_CHECK_ARG(ndim >= 0 && ndim <= kMaxDims, "TensorView ndim = ", ndim,
                    ": expected 0..", kMaxDims);
  TensorView v;
  v.data_ = data;
  v.dtype_ = dtype;
  v.device_ = device;
  v.ndim_ = ndim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    TESSERA_CHECK_ARG(shape[d] >= 0, "TensorView shape[", d, "] = ", shape[d], ": expected >= 0");
    v.shape_[d] = shape[d];
    v.strides_[d] = stride;
    stride *= shape[d];
  }
  return v;
}

int64_t TensorView::size(int dim) const {
  TESSERA_CHECK_ARG(dim >= 0 && dim < ndim_, "dim = ", dim, ": expected 0..", ndim_ - 1,
                    " for ", to_string());
  return shape_[dim];
}

int64_t TensorView::stride(int dim) const {
  TESSERA_CHECK_ARG(dim >= 0 && dim < ndim_, "dim = ", dim, ": expected 0..", ndim_ - 1,
                    " for ", to_string());
  return strides_[dim];
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];
  return n;
}

size_t TensorView::span_bytes() const {
  if (numel() == 0) return 0;
  int64_t last = 0;
  for (int d = 0; d < ndim_; ++d) last += (shape_[d] - 1) * strides_[d];
  return size_t(last + 1) * element_size();
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

TensorView TensorView::slice(int dim, int64_t start, int64_t length) const {
  TESSERA_CHECK_ARG(dim >= 0 && dim < ndim_, "slice dim = ", dim, ": expected 0..", ndim_ - 1);
  TESSERA_CHECK_ARG(start >= 0 && length >= 0 && start + length <= shape_[dim], "slice [", start,
                    ", ", start + length, ") of dim ", dim, ": expected within [0, ",
                    shape_[dim], ") of ", to_string());
  TensorView v = *this;
  v.data_ = static_cast<char*>(data_) + start * strides_[dim] * int64_t(element_size());
  v.shape_[dim] = length;
  return v;
}

TensorView TensorView::flat(int64_t offset, int64_t count) const {
  TESSERA_CHECK_ARG(is_contiguous(), "flat(): view ", to_string(), " must be contiguous");
  TESSERA_CHECK_ARG(offset >= 0 && count >= 0 && offset + count <= numel(), "flat(", offset, ", ",
                    count, "): expected within the ", numel(), " elements of ", to_string());
  int64_t shape[1] = {count};
  return contiguous(static_cast<char*>(data_) + offset * int64_t(element_size()), dtype_, device_,
                    shape, 1);
}

std::string TensorView::to_string() const {
  std::string s = str(dtype_name(dtype_), "[");
  for (int d = 0; d < ndim_; ++d) s += str(d ? ", " : "", shape_[d]);
  return s + "] " + device_.to_string();
}

void check_contiguous(const TensorView& t, const char* what) {
  TESSERA_CHECK_ARG(t.is_contiguous(), what, " = ", t.to_string(), ": expected contiguous");
}

void check_device(const TensorView& t, Device expected, const char* what) {
  TESSERA_CHECK_ARG(t.device() == expected, what, " is on ", t.device().to_string(),
                    ": expected ", expected.to_string());
}

void check_dtype(const TensorView& t, DType expected, const char* what) {
  TESSERA_CHECK_ARG(t.dtype() == expected, what, " has dtype ", dtype_name(t.dtype()),
                    ": expected ", dtype_name(expected));
}

void check_min_bytes(const TensorView& t, size_t bytes, const char* what) {
  TESSERA_CHECK_ARG(t.numel() * t.element_size() >= bytes, what, " = ", t.to_string(), " holds ",
                    t.numel() * t.element_size(), " bytes: expected at least ", bytes);
}

}  // namespace tessera
