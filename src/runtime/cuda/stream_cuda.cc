// cuda implementations of Stream and Event.
#include <cuda_runtime.h>

#include "runtime/stream_impl.h"
#include "tessera/core/buffer.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera {

namespace {
struct CudaStream final : Stream::Impl {
  cudaStream_t stream = nullptr;
  int device_index = 0;
  bool owned = false;
  ~CudaStream() override {
    if (owned && stream) cudaStreamDestroy(stream);
  }
  Device device() const override { return Device::cuda(device_index); }
  void* cuda_stream() const override { return stream; }
  void synchronize() const override { TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream)); }
  void run_host(std::function<void()> fn) const override {
    auto* heap_fn = new std::function<void()>(std::move(fn));
    TESSERA_CUDA_CHECK(cudaLaunchHostFunc(
        stream,
        [](void* p) {
          auto* f = static_cast<std::function<void()>*>(p);
          (*f)();
          delete f;
        },
        heap_fn));
  }
};

struct CudaEvent final : Event::Impl {
  cudaEvent_t event = nullptr;
  ~CudaEvent() override {
    if (event) cudaEventDestroy(event);
  }
  void record(const Stream& s) override {
    TESSERA_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(s.cuda_stream())));
  }
  void wait_on(const Stream& s) const override {
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.cuda_stream()), event, 0));
  }
  bool query() const override {
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaErrorNotReady) return false;
    TESSERA_CUDA_CHECK(e);
    return true;
  }
  float elapsed_ms_since(const Event::Impl& start) const override {
    float ms = 0;
    TESSERA_CUDA_CHECK(
        cudaEventElapsedTime(&ms, static_cast<const CudaEvent&>(start).event, event));
    return ms;
  }
};

void* cuda_allocate(size_t bytes, int device) {
  int previous = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&previous));
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  cudaSetDevice(previous);
  TESSERA_CHECK(e == cudaSuccess, ErrorCode::kCuda, "cudaMalloc of ", bytes, " bytes on cuda:",
                device, " failed: ", cudaGetErrorString(e));
  return p;
}

void cuda_release(void* p, int) { cudaFree(p); }

// Registers the cuda allocator with core when the library loads.
const bool kAllocatorRegistered = [] {
  register_cuda_allocator({&cuda_allocate, &cuda_release});
  return true;
}();
}  // namespace

std::shared_ptr<Stream::Impl> make_cuda_stream(int device, int priority) {
  auto s = std::make_shared<CudaStream>();
  s->device_index = device;
  s->owned = true;
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
  TESSERA_CUDA_CHECK(cudaStreamCreateWithPriority(&s->stream, cudaStreamNonBlocking, priority));
  return s;
}

std::shared_ptr<Stream::Impl> wrap_cuda_stream(void* stream, int device) {
  auto s = std::make_shared<CudaStream>();
  s->stream = static_cast<cudaStream_t>(stream);
  s->device_index = device;
  return s;
}

std::shared_ptr<Event::Impl> make_cuda_event(int device, bool timing) {
  auto e = std::make_shared<CudaEvent>();
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
  TESSERA_CUDA_CHECK(
      cudaEventCreateWithFlags(&e->event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

int cuda_visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace tessera
