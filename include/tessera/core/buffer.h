// Buffer: owning device or host memory; Tensor = Buffer + a contiguous view over it.
#pragma once

#include <cstdint>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/core/tensor_view.h"

namespace tessera {

class Buffer {
 public:
  Buffer() = default;
  // Allocates `bytes` on `device` (256-byte aligned). cuda allocations need the cuda backend.
  static Buffer allocate(size_t bytes, Device device);
  // Wraps memory owned elsewhere; `release` runs when the last copy goes away.
  static Buffer adopt(void* data, size_t bytes, Device device, std::function<void(void*)> release);

  void* data() const { return state_ ? state_->data : nullptr; }
  size_t bytes() const { return state_ ? state_->bytes : 0; }
  Device device() const { return state_ ? state_->device : Device{}; }
  explicit operator bool() const { return state_ != nullptr; }

 private:
  struct State {
    void* data = nullptr;
    size_t bytes = 0;
    Device device{};
    std::function<void(void*)> release;
    ~State();
  };
  std::shared_ptr<State> state_;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(std::initializer_list<int64_t> shape, DType dtype, Device device);
  static Tensor empty(const std::vector<int64_t>& shape, DType dtype, Device device);
  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }
  void* data() const { return view_.data(); }
  template <typename T>
  T* data_as() const { return view_.data_as<T>(); }
  const Buffer& buffer() const { return buffer_; }

 private:
  Buffer buffer_;
  TensorView view_;
};

// Device allocator hooks: the cuda backend registers these at load time so core stays free
// of CUDA headers. Allocating cuda memory without them throws kUnsupported.
struct DeviceAllocator {
  void* (*allocate)(size_t bytes, int device) = nullptr;
  void (*release)(void* data, int device) = nullptr;
};
void register_cuda_allocator(DeviceAllocator allocator);

}  // namespace tessera
