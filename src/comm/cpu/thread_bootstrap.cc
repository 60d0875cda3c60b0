#include "comm/cpu/thread_bootstrap.h"

#include "tessera/core/error.h"

namespace tessera::cpu {

void ThreadBootstrap::allgather(const void* send, void* recv, size_t bytes) {
  TESSERA_CHECK_ARG((send != nullptr && recv != nullptr) || bytes == 0,
                    "Bootstrap::allgather: send = ", send, ", recv = ", recv,
                    " with bytes = ", bytes, ": expected buffers of `bytes` bytes");
  // The communicator only reads `send`: the const_cast never writes through it.
  const int64_t count = int64_t(bytes);
  comm_.all_gather(TensorView(const_cast<void*>(send), DType::kU8, Device::cpu(), {count}),
                   TensorView(recv, DType::kU8, Device::cpu(), {count * size()}), Stream::cpu());
}

}  // namespace tessera::cpu
