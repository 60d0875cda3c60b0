// IpcHeap: the symmetric heap over CUDA IPC, for ranks that all sit on one host (the fallback
// when NVSHMEM is not available). Each rank cudaMalloc's one arena, exports it with
// cudaIpcGetMemHandle, the handles travel over the Bootstrap (allgather), and every rank opens
// every peer's arena (cudaIpcOpenMemHandle) with peer access enabled where the GPUs allow it.
//   put/get          cudaMemcpyAsync between device pointers (copy engines) on the stream
//   put_with_signal  the copy, then a one-thread kernel that fences and stores/adds the signal
//                    into the peer's word with system scope (signal_kernels.h)
// Ranks on different hosts: the constructor throws kUnsupported on every rank.
// Ranks that are threads of one process (a "thread" bootstrap: the loopback ranks of
// comm/loopback.h) exchange their arenas' plain device pointers instead (a process cannot open
// its own IPC handles); the transport is then "loopback".
#pragma once

#include <cstdint>
#include <vector>

#include "comm/cuda/cuda_heap.h"

namespace tessera::cuda_comm {

class IpcHeap final : public CudaSymmetricHeap {
 public:
  // Collective over `bootstrap`'s ranks; `bootstrap` must outlive the heap. `device` is this
  // rank's GPU (current on the calling thread).
  IpcHeap(Bootstrap& bootstrap, const Topology& topology, int device, size_t heap_bytes);
  ~IpcHeap() override;

 protected:
  const char* transport_name() const override { return in_process_ ? "loopback" : "ipc"; }
  void direct_put(size_t dst_offset, const void* src, size_t bytes, int peer,
                  cudaStream_t stream) override;
  void direct_get(void* dst, size_t src_offset, size_t bytes, int peer,
                  cudaStream_t stream) override;
  void direct_put_with_signal(size_t dst_offset, const void* src, size_t bytes, int peer,
                              int signal_word, SignalOp op, uint64_t value,
                              cudaStream_t stream) override;
  void direct_signal(int peer, int signal_word, SignalOp op, uint64_t value,
                     cudaStream_t stream) override;

 private:
  void attach_in_process(Bootstrap& bootstrap, int device);
  void release() noexcept;

  bool in_process_ = false;
  void* arena_ = nullptr;
  std::vector<void*> opened_;  // peer arenas opened through IPC (closed in the destructor)
};

}  // namespace tessera::cuda_comm
