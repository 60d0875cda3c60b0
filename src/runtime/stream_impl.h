// Backend implementations behind Stream and Event (internal).
#pragma once

#include <functional>

#include "tessera/runtime/stream.h"

namespace tessera {

struct Stream::Impl {
  virtual ~Impl() = default;
  virtual Device device() const = 0;
  virtual void* cuda_stream() const = 0;
  virtual void synchronize() const = 0;
  virtual void run_host(std::function<void()> fn) const = 0;
};

struct Event::Impl {
  virtual ~Impl() = default;
  virtual void record(const Stream& s) = 0;
  virtual void wait_on(const Stream& s) const = 0;
  virtual bool query() const = 0;
  virtual float elapsed_ms_since(const Impl& start) const = 0;
};

#ifdef TESSERA_WITH_CUDA
std::shared_ptr<Stream::Impl> make_cuda_stream(int device, int priority);
std::shared_ptr<Stream::Impl> wrap_cuda_stream(void* stream, int device);
std::shared_ptr<Event::Impl> make_cuda_event(int device, bool timing);
int cuda_visible_devices();
#endif

}  // namespace tessera
