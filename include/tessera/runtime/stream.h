// Stream and Event over the cpu and cuda backends.
//
// A cpu Stream runs enqueued work inline on the calling thread (the cpu backend's ranks are
// threads; ordering within a rank is program order), so cpu Events are complete as soon as
// they are recorded. A cuda Stream wraps a cudaStream_t; Events are cudaEvent_t. Every GPU
// entry point in Tessera takes a Stream and neither allocates nor synchronizes on it, so work
// enqueued through it can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "tessera/core/tensor_view.h"

namespace tessera {

enum class Backend : uint8_t { kCpu, kCuda };
const char* backend_name(Backend backend);
// True when this build has the cuda backend and a CUDA device is visible.
bool cuda_available();
int cuda_device_count();

class Stream {
 public:
  // The inline cpu stream.
  static Stream cpu();
  // A new non-blocking cuda stream on `device` (lower priority value = higher priority).
  static Stream create_cuda(int device, int priority = 0);
  // Borrows a stream owned elsewhere (e.g. a framework's current stream); not destroyed here.
  static Stream wrap_cuda(void* cuda_stream, int device);

  Backend backend() const { return backend_; }
  Device device() const;
  // cudaStream_t as void*; nullptr for cpu.
  void* cuda_stream() const;
  // Blocks until enqueued work finished (cpu: returns at once).
  void synchronize() const;
  // Runs `fn` on the host in stream order (cpu: now; cuda: cudaLaunchHostFunc).
  void run_host(std::function<void()> fn) const;

  struct Impl;

 private:
  Backend backend_ = Backend::kCpu;
  std::shared_ptr<Impl> impl_;
};

class Event {
 public:
  Event() = default;
  static Event create(const Stream& like, bool timing = false);

  void record(const Stream& stream);
  // Makes `stream` wait for this event (no host block).
  void wait_on(const Stream& stream) const;
  bool query() const;
  // Blocks until the event completed or `timeout_ms` passed; on timeout throws kTimeout
  // with `what` in the message (who waited for what).
  void synchronize(int64_t timeout_ms, const char* what) const;
  // Milliseconds from `start` to this event (both timing events, both completed).
  float elapsed_ms_since(const Event& start) const;

  struct Impl;

 private:
  Backend backend_ = Backend::kCpu;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera
