// IpcHeap: CUDA IPC symmetric heap inside one host (see ipc_heap.h).
#include "comm/cuda/ipc_heap.h"

#include <cstring>
#include <string>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::cuda_comm {

namespace {
// What each rank publishes about its arena.
struct ExportedArena {
  cudaIpcMemHandle_t handle;
  char pci_bus_id[32];
};

// Enables this device's access to `pci_bus_id`'s GPU when it is visible here and P2P is possible
// (CUDA IPC mappings work without it, but through the lazy flag only for the mapping itself).
void enable_peer_access(int device, const char* pci_bus_id) {
  int peer_device = -1;
  if (cudaDeviceGetByPCIBusId(&peer_device, pci_bus_id) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (peer_device == device) return;
  int can_access = 0;
  TESSERA_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, device, peer_device));
  if (!can_access) return;
  cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // not an error for us; clear it so later checks do not see it
    return;
  }
  TESSERA_CUDA_CHECK(e);
}
}  // namespace

IpcHeap::IpcHeap(Bootstrap& bootstrap, const Topology& topology, int device, size_t heap_bytes)
    : CudaSymmetricHeap(bootstrap, topology, device, heap_bytes) {
  const int num_ranks = size();
  // The topology is the same on every rank, so every rank throws here or none does.
  TESSERA_CHECK(int(topology.host_name.size()) == num_ranks, ErrorCode::kInternal, "topology has ",
                topology.host_name.size(), " host names for ", num_ranks, " ranks");
  for (int r = 1; r < num_ranks; ++r) {
    TESSERA_CHECK(topology.host_name[r] == topology.host_name[0], ErrorCode::kUnsupported,
                  "the ipc symmetric heap maps peers' memory with CUDA IPC, which works only "
                  "inside one host; rank 0 is on '",
                  topology.host_name[0], "' but rank ", r, " is on '", topology.host_name[r],
                  "': use heap_transport=nvshmem across hosts");
  }
  if (std::string_view(bootstrap.kind()) == "thread") {
    attach_in_process(bootstrap, device);
    return;
  }
  try {
    ExportedArena mine;
    std::memset(&mine, 0, sizeof(mine));
    std::string error;
    try {
      TESSERA_CUDA_CHECK(cudaSetDevice(device));
      TESSERA_CUDA_CHECK(cudaMalloc(&arena_, arena_bytes()));
      TESSERA_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, arena_));
      TESSERA_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.pci_bus_id, sizeof(mine.pci_bus_id), device));
    } catch (const Error& e) {
      error = e.what();
    }
    agree_on_success(bootstrap, error, ErrorCode::kCuda,
                     str("allocating the ", arena_bytes(), "-byte IPC arena"));

    std::vector<ExportedArena> all(num_ranks);
    bootstrap.allgather(&mine, all.data(), sizeof(ExportedArena));
    std::vector<void*> peer_bases(num_ranks, nullptr);
    try {
      for (int r = 0; r < num_ranks; ++r) {
        if (r == rank()) continue;
        all[r].pci_bus_id[sizeof(all[r].pci_bus_id) - 1] = '\0';
        enable_peer_access(device, all[r].pci_bus_id);
        void* mapped = nullptr;
        cudaError_t e =
            cudaIpcOpenMemHandle(&mapped, all[r].handle, cudaIpcMemLazyEnablePeerAccess);
        TESSERA_CHECK(e == cudaSuccess, ErrorCode::kCuda, "cudaIpcOpenMemHandle for rank ", r,
                      "'s arena (GPU ", all[r].pci_bus_id, ") failed: ", cudaGetErrorString(e));
        opened_.push_back(mapped);
        peer_bases[r] = mapped;
      }
    } catch (const Error& e) {
      error = e.what();
    }
    agree_on_success(bootstrap, error, ErrorCode::kCuda, "opening the peers' IPC arenas");
    attach_arena(arena_, std::move(peer_bases));
  } catch (...) {
    release();
    throw;
  }
  TESSERA_LOG(kDebug, "ipc symmetric heap: ", capacity_bytes(), " bytes on cuda:", device, ", ",
              opened_.size(), " peers mapped");
}

void IpcHeap::attach_in_process(Bootstrap& bootstrap, int device) {
  in_process_ = true;
  try {
    std::string error;
    try {
      TESSERA_CUDA_CHECK(cudaSetDevice(device));
      TESSERA_CUDA_CHECK(cudaMalloc(&arena_, arena_bytes()));
    } catch (const Error& e) {
      error = e.what();
    }
    agree_on_success(bootstrap, error, ErrorCode::kCuda,
                     str("allocating the ", arena_bytes(), "-byte loopback arena"));
    std::vector<void*> peer_bases(size_t(size()), nullptr);
    bootstrap.allgather(&arena_, peer_bases.data(), sizeof(void*));
    attach_arena(arena_, std::move(peer_bases));
  } catch (...) {
    release();
    throw;
  }
}

IpcHeap::~IpcHeap() {
  release();
}

void IpcHeap::release() noexcept {
  // Errors are ignored: after a device-side trap the context is gone and these calls fail. The
  // driver keeps an exported allocation alive while a peer still has it open.
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
  opened_.clear();
  if (arena_) cudaFree(arena_);
  arena_ = nullptr;
  cudaGetLastError();
}

void IpcHeap::direct_put(size_t dst_offset, const void* src, size_t bytes, int peer,
                         cudaStream_t stream) {
  TESSERA_HEAP_CUDA_CHECK(
      cudaMemcpyAsync(peer_base(peer) + dst_offset, src, bytes, cudaMemcpyDefault, stream));
}

void IpcHeap::direct_get(void* dst, size_t src_offset, size_t bytes, int peer,
                         cudaStream_t stream) {
  TESSERA_HEAP_CUDA_CHECK(
      cudaMemcpyAsync(dst, peer_base(peer) + src_offset, bytes, cudaMemcpyDefault, stream));
}

void IpcHeap::direct_put_with_signal(size_t dst_offset, const void* src, size_t bytes, int peer,
                                     int signal_word, SignalOp op, uint64_t value,
                                     cudaStream_t stream) {
  if (bytes > 0) direct_put(dst_offset, src, bytes, peer, stream);
  // The signal kernel runs after the copy completed (stream order) and fences before the store.
  kernel_signal(peer, signal_word, op, value, 0, stream);
}

void IpcHeap::direct_signal(int peer, int signal_word, SignalOp op, uint64_t value,
                            cudaStream_t stream) {
  kernel_signal(peer, signal_word, op, value, 0, stream);
}

}  // namespace tessera::cuda_comm
