// NvshmemHeap: the symmetric heap over NVSHMEM (host library only: Tessera links
// libnvshmem_host.so.3, uses the host-side *_on_stream API and nvshmem_ptr(), and its own kernels
// for waits, barriers and the paced transport; no relocatable device code).
//
// Initialization (collective): rank 0 makes an NVSHMEM unique id, the Bootstrap broadcasts it,
// every rank calls nvshmemx_hostlib_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID). Before that, when the
// user has not set them:
//   NVSHMEM_BOOTSTRAP_UID_PLUGIN / NVSHMEM_BOOTSTRAP_PLUGIN: the full path of
//       nvshmem_bootstrap_uid.so.3 next to the loaded libnvshmem_host (found with dladdr; the
//       build-time TESSERA_NVSHMEM_LIB_DIR otherwise), because NVSHMEM dlopens the plugin by
//       bare name and the pip package's lib folder is on no search path;
//   NVSHMEM_SYMMETRIC_SIZE: the arena plus NVSHMEM's own reserve;
//   NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo and NVSHMEM_REMOTE_TRANSPORT=none when every rank is
//       on one host;
//   NVSHMEM_DISABLE_NCCL=1 (Tessera uses no NVSHMEM collectives).
// The arena is one nvshmem_malloc; allocate() sub-allocates it (cuda_heap.h).
//   put / get        nvshmemx_putmem_on_stream / nvshmemx_getmem_on_stream
//   put_with_signal  nvshmemx_putmem_signal_on_stream
//   signal           nvshmemx_quiet_on_stream, then nvshmemx_signal_op_on_stream
//   peer_ptr         nvshmem_ptr (non-null for peers reachable by load/store, e.g. NVLink)
// NVSHMEM is process-global: one NvshmemHeap per process at a time.
#pragma once

#include <cstdint>
#include <string>

#include "comm/cuda/cuda_heap.h"

namespace tessera::cuda_comm {

class NvshmemHeap final : public CudaSymmetricHeap {
 public:
  // Collective over `bootstrap`'s ranks; `bootstrap` must outlive the heap. `device` is this
  // rank's GPU (current on the calling thread). Throws kUnsupported when NVSHMEM is already in
  // use in this process or its bootstrap plugin cannot be found, kNvshmem when NVSHMEM fails.
  NvshmemHeap(Bootstrap& bootstrap, const Topology& topology, int device, size_t heap_bytes);
  ~NvshmemHeap() override;

  // The folder holding libnvshmem_host.so.3 and its plugins ("" when unknown).
  static std::string library_dir();

 protected:
  const char* transport_name() const override { return "nvshmem"; }
  void direct_put(size_t dst_offset, const void* src, size_t bytes, int peer,
                  cudaStream_t stream) override;
  void direct_get(void* dst, size_t src_offset, size_t bytes, int peer,
                  cudaStream_t stream) override;
  void direct_put_with_signal(size_t dst_offset, const void* src, size_t bytes, int peer,
                              int signal_word, SignalOp op, uint64_t value,
                              cudaStream_t stream) override;
  void direct_signal(int peer, int signal_word, SignalOp op, uint64_t value,
                     cudaStream_t stream) override;
  // nvshmemx_quiet_on_stream: NVSHMEM orders a put before a later signal only through quiet
  // (or put_with_signal); over NVLink it is nearly free.
  void flush_puts(cudaStream_t stream) override;

 private:
  void shutdown() noexcept;

  void* arena_ = nullptr;
  bool initialized_ = false;
};

}  // namespace tessera::cuda_comm
