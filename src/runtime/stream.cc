#include "tessera/runtime/stream.h"

#include <chrono>
#include <thread>

#include "runtime/stream_impl.h"
#include "tessera/core/error.h"

namespace tessera {

const char* backend_name(Backend backend) { return backend == Backend::kCpu ? "cpu" : "cuda"; }

int cuda_device_count() {
#ifdef TESSERA_WITH_CUDA
  return cuda_visible_devices();
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace {
struct CpuStream final : Stream::Impl {
  Device device() const override { return Device::cpu(); }
  void* cuda_stream() const override { return nullptr; }
  void synchronize() const override {}
  void run_host(std::function<void()> fn) const override { fn(); }
};

struct CpuEvent final : Event::Impl {
  std::chrono::steady_clock::time_point when{};
  void record(const Stream&) override { when = std::chrono::steady_clock::now(); }
  void wait_on(const Stream&) const override {}
  bool query() const override { return true; }
  float elapsed_ms_since(const Event::Impl& start) const override {
    auto& s = static_cast<const CpuEvent&>(start);
    return std::chrono::duration<float, std::milli>(when - s.when).count();
  }
};

#ifndef TESSERA_WITH_CUDA
[[noreturn]] void no_cuda(const char* what) {
  throw_error(ErrorCode::kUnsupported, str(what, ": this build of Tessera has no cuda backend"));
}
#endif
}  // namespace

Stream Stream::cpu() {
  static const auto impl = std::make_shared<CpuStream>();
  Stream s;
  s.backend_ = Backend::kCpu;
  s.impl_ = impl;
  return s;
}

Stream Stream::create_cuda(int device, int priority) {
#ifdef TESSERA_WITH_CUDA
  Stream s;
  s.backend_ = Backend::kCuda;
  s.impl_ = make_cuda_stream(device, priority);
  return s;
#else
  (void)device;
  (void)priority;
  no_cuda("Stream::create_cuda");
#endif
}

Stream Stream::wrap_cuda(void* cuda_stream, int device) {
#ifdef TESSERA_WITH_CUDA
  Stream s;
  s.backend_ = Backend::kCuda;
  s.impl_ = wrap_cuda_stream(cuda_stream, device);
  return s;
#else
  (void)cuda_stream;
  (void)device;
  no_cuda("Stream::wrap_cuda");
#endif
}

Device Stream::device() const { return impl_ ? impl_->device() : Device::cpu(); }
void* Stream::cuda_stream() const { return impl_ ? impl_->cuda_stream() : nullptr; }
void Stream::synchronize() const {
  if (impl_) impl_->synchronize();
}
void Stream::run_host(std::function<void()> fn) const {
  if (impl_) {
    impl_->run_host(std::move(fn));
  } else {
    fn();
  }
}

Event Event::create(const Stream& like, bool timing) {
  Event e;
  e.backend_ = like.backend();
  if (like.backend() == Backend::kCpu) {
    e.impl_ = std::make_shared<CpuEvent>();
    return e;
  }
#ifdef TESSERA_WITH_CUDA
  e.impl_ = make_cuda_event(like.device().index, timing);
  return e;
#else
  (void)timing;
  no_cuda("Event::create");
#endif
}

void Event::record(const Stream& stream) {
  TESSERA_CHECK_ARG(impl_ != nullptr, "Event::record on an event that was never created");
  TESSERA_CHECK_ARG(stream.backend() == backend_, "Event::record: event is ",
                    backend_name(backend_), " but stream is ", backend_name(stream.backend()));
  impl_->record(stream);
}

void Event::wait_on(const Stream& stream) const {
  TESSERA_CHECK_ARG(impl_ != nullptr, "Event::wait_on on an event that was never created");
  impl_->wait_on(stream);
}

bool Event::query() const { return impl_ ? impl_->query() : true; }

void Event::synchronize(int64_t timeout_ms, const char* what) const {
  if (!impl_) return;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::microseconds(2);
  while (!impl_->query()) {
    TESSERA_CHECK(std::chrono::steady_clock::now() < deadline, ErrorCode::kTimeout, what,
                  ": not complete after ", timeout_ms, " ms (TESSERA_TIMEOUT_MS)");
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(500)) pause *= 2;
  }
}

float Event::elapsed_ms_since(const Event& start) const {
  TESSERA_CHECK_ARG(impl_ && start.impl_, "Event::elapsed_ms_since needs two created events");
  TESSERA_CHECK_ARG(backend_ == start.backend_, "Event::elapsed_ms_since: events of different backends");
  return impl_->elapsed_ms_since(*start.impl_);
}

}  // namespace tessera
