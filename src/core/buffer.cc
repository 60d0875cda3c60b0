#include "tessera/core/buffer.h"

#include <cstdlib>
#include <mutex>

#include "tessera/core/error.h"

namespace tessera {

namespace {
DeviceAllocator& cuda_allocator() {
  static DeviceAllocator allocator;
  return allocator;
}
}  // namespace

void register_cuda_allocator(DeviceAllocator allocator) { cuda_allocator() = allocator; }

Buffer::State::~State() {
  if (release && data) release(data);
}

Buffer Buffer::allocate(size_t bytes, Device device) {
  Buffer b;
  b.state_ = std::make_shared<State>();
  b.state_->bytes = bytes;
  b.state_->device = device;
  size_t rounded = (bytes + 255) / 256 * 256;
  if (rounded == 0) rounded = 256;
  if (device.kind == DeviceKind::kCpu) {
    void* p = std::aligned_alloc(256, rounded);
    TESSERA_CHECK(p != nullptr, ErrorCode::kSystem, "host allocation of ", bytes, " bytes failed");
    b.state_->data = p;
    b.state_->release = [](void* q) { std::free(q); };
    return b;
  }
  const DeviceAllocator& a = cuda_allocator();
  TESSERA_CHECK(a.allocate != nullptr, ErrorCode::kUnsupported, "allocating ", bytes,
                " bytes on ", device.to_string(), ": this build has no cuda backend");
  int index = device.index;
  b.state_->data = a.allocate(rounded, index);
  auto release = a.release;
  b.state_->release = [release, index](void* q) { release(q, index); };
  return b;
}

Buffer Buffer::adopt(void* data, size_t bytes, Device device, std::function<void(void*)> release) {
  Buffer b;
  b.state_ = std::make_shared<State>();
  b.state_->data = data;
  b.state_->bytes = bytes;
  b.state_->device = device;
  b.state_->release = std::move(release);
  return b;
}

Tensor Tensor::empty(std::initializer_list<int64_t> shape, DType dtype, Device device) {
  return empty(std::vector<int64_t>(shape), dtype, device);
}

Tensor Tensor::empty(const std::vector<int64_t>& shape, DType dtype, Device device) {
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    TESSERA_CHECK_ARG(shape[d] >= 0, "Tensor::empty shape[", d, "] = ", shape[d],
                      ": expected >= 0");
    n *= shape[d];
  }
  Tensor t;
  t.buffer_ = Buffer::allocate(size_t(n) * dtype_size(dtype), device);
  t.view_ = TensorView::contiguous(t.buffer_.data(), dtype, device, shape.data(),
                                   int(shape.size()));
  return t;
}

}  // namespace tessera
