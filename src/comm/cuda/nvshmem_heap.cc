// NvshmemHeap: NVSHMEM symmetric heap through the host library (see nvshmem_heap.h).
#include "comm/cuda/nvshmem_heap.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

// Host API only: nvshmem.h would pull in the device headers, which need nvcc and -rdc.
#include <host/nvshmem_api.h>
#include <host/nvshmemx_api.h>

#include "comm/cuda/nvshmem_check.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/cuda_check.h"

#ifndef TESSERA_NVSHMEM_LIB_DIR
#define TESSERA_NVSHMEM_LIB_DIR ""
#endif

namespace tessera::cuda_comm {

namespace {

// NVSHMEM is initialized once per process; this guards it.
std::atomic<bool> g_nvshmem_in_use{false};
bool g_symmetric_size_is_ours = false;  // guarded by g_nvshmem_in_use

// NVSHMEM allocates its own symmetric objects (team sync arrays, collective scratch) from the
// same heap as nvshmem_malloc.
constexpr size_t kNvshmemReserveBytes = size_t(256) << 20;

constexpr const char* kUidPluginName = "nvshmem_bootstrap_uid.so.3";

bool readable(const std::string& path) {
  return !path.empty() && access(path.c_str(), R_OK) == 0;
}

// Sets `name` only when the user did not (their settings win).
void set_default_env(const char* name, const std::string& value) {
  if (std::getenv(name) != nullptr) return;
  setenv(name, value.c_str(), 0);
  TESSERA_LOG(kDebug, "set ", name, "=", value);
}

int nvshmem_signal_op(SignalOp op) {
  return op == SignalOp::kSet ? NVSHMEM_SIGNAL_SET : NVSHMEM_SIGNAL_ADD;
}

// Finds the uid bootstrap plugin: next to the libnvshmem_host this process loaded, else in the
// build-time folder. "" when neither has it.
std::string find_uid_plugin(std::string* searched) {
  std::string runtime_dir = NvshmemHeap::library_dir();
  std::string build_dir = TESSERA_NVSHMEM_LIB_DIR;
  *searched = str("'", runtime_dir, "' (loaded libnvshmem_host) and '", build_dir,
                  "' (TESSERA_NVSHMEM_LIB_DIR)");
  for (const std::string& dir : {runtime_dir, build_dir}) {
    if (dir.empty()) continue;
    std::string path = dir + "/" + kUidPluginName;
    if (readable(path)) return path;
  }
  return "";
}

bool single_host(const Topology& topology) {
  for (const std::string& host : topology.host_name) {
    if (host != topology.host_name.front()) return false;
  }
  return true;
}

}  // namespace

std::string NvshmemHeap::library_dir() {
  Dl_info info;
  std::memset(&info, 0, sizeof(info));
  if (dladdr(reinterpret_cast<void*>(&nvshmem_malloc), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  char resolved[PATH_MAX];
  std::string path = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

NvshmemHeap::NvshmemHeap(Bootstrap& bootstrap, const Topology& topology, int device,
                         size_t heap_bytes)
    : CudaSymmetricHeap(bootstrap, topology, device, heap_bytes) {
  // Local prerequisites first, agreed on by every rank, so that either all ranks enter
  // NVSHMEM's collective initialization or none does.
  std::string error;
  bool claimed = false;
  if (g_nvshmem_in_use.exchange(true)) {
    error =
        "NVSHMEM is already initialized in this process (one NVSHMEM heap per process at a "
        "time); destroy the other context first or use heap_transport=ipc";
  } else {
    claimed = true;
  }
  std::string plugin;
  if (error.empty() && std::getenv("NVSHMEM_BOOTSTRAP_UID_PLUGIN") == nullptr) {
    std::string searched;
    plugin = find_uid_plugin(&searched);
    if (plugin.empty()) {
      error = str(kUidPluginName, " not found in ", searched,
                  "; set NVSHMEM_BOOTSTRAP_UID_PLUGIN to its full path");
    }
  }
  try {
    agree_on_success(bootstrap, error, ErrorCode::kUnsupported, "preparing NVSHMEM");
  } catch (...) {
    if (claimed) g_nvshmem_in_use = false;
    throw;
  }

  bool every_rank_initialized = false;
  try {
    if (!plugin.empty()) {
      // NVSHMEM dlopens its bootstrap plugin by file name; the folder of a pip-installed
      // NVSHMEM is on no loader search path, so give it the full path. The _UID_ variable is
      // the one read for NVSHMEMX_INIT_WITH_UNIQUEID; the generic one is for
      // NVSHMEM_BOOTSTRAP=plugin and is set alike so either route finds it.
      set_default_env("NVSHMEM_BOOTSTRAP_UID_PLUGIN", plugin);
      set_default_env("NVSHMEM_BOOTSTRAP_PLUGIN", plugin);
    }
    // Sized by Tessera unless the user sized it (an earlier heap of this process may have set it
    // for a smaller arena).
    if (std::getenv("NVSHMEM_SYMMETRIC_SIZE") == nullptr || g_symmetric_size_is_ours) {
      setenv("NVSHMEM_SYMMETRIC_SIZE", str(arena_bytes() + kNvshmemReserveBytes).c_str(), 1);
      g_symmetric_size_is_ours = true;
    }
    // The uid bootstrap listens on a socket of rank 0; on one host loopback always works, even
    // in a container without other interfaces.
    if (single_host(topology)) {
      set_default_env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo");
      // Every peer is reached over NVLink/PCIe P2P: no network transport to probe for.
      set_default_env("NVSHMEM_REMOTE_TRANSPORT", "none");
    }
    // Tessera uses NVSHMEM for one-sided traffic only, never its collectives, so NVSHMEM need
    // not build NCCL communicators of its own (it would, through the emulated NCCL_HOSTID).
    set_default_env("NVSHMEM_DISABLE_NCCL", "1");

    TESSERA_CUDA_CHECK(cudaSetDevice(device));

    struct UniqueIdMessage {
      int status;
      nvshmemx_uniqueid_t id;
    };
    UniqueIdMessage message;
    std::memset(&message, 0, sizeof(message));
    if (rank() == 0) {
      nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
      message.status = nvshmemx_get_uniqueid(&id);
      message.id = id;
    }
    bootstrap.broadcast(&message, sizeof(message), 0);
    TESSERA_CHECK(message.status == 0, ErrorCode::kNvshmem,
                  "nvshmemx_get_uniqueid failed on rank 0 with status ", message.status);

    // nvshmemx_init_attr() is an inline wrapper around a symbol of the device library; the host
    // library's entry point is nvshmemx_hostlib_init_attr. The initializer sets the versions.
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    TESSERA_NVSHMEM_CHECK(nvshmemx_set_attr_uniqueid_args(rank(), size(), &message.id, &attr));
    const int status = nvshmemx_hostlib_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
    initialized_ = status == 0;
    agree_on_success(bootstrap,
                     status == 0 ? std::string()
                                 : str("nvshmemx_hostlib_init_attr returned ", status,
                                       " (NVSHMEM_DEBUG=WARN says why)"),
                     ErrorCode::kNvshmem, "initializing NVSHMEM");
    every_rank_initialized = true;
    TESSERA_CHECK(nvshmem_my_pe() == rank() && nvshmem_n_pes() == size(), ErrorCode::kInternal,
                  "NVSHMEM placed this rank as PE ", nvshmem_my_pe(), " of ", nvshmem_n_pes(),
                  "; expected rank ", rank(), " of ", size());

    arena_ = nvshmem_malloc(arena_bytes());
    agree_on_success(
        bootstrap,
        arena_
            ? std::string()
            : str("nvshmem_malloc(", arena_bytes(),
                  ") returned null; NVSHMEM_SYMMETRIC_SIZE=", std::getenv("NVSHMEM_SYMMETRIC_SIZE"),
                  " must cover the heap plus NVSHMEM's own reserve"),
        ErrorCode::kNvshmem, "allocating the NVSHMEM arena");

    std::vector<void*> peer_bases(size(), nullptr);
    for (int pe = 0; pe < size(); ++pe) peer_bases[pe] = nvshmem_ptr(arena_, pe);
    attach_arena(arena_, std::move(peer_bases));
  } catch (...) {
    if (initialized_ && !every_rank_initialized) {
      // Finalizing is collective and the ranks that failed would never join it: leave NVSHMEM
      // initialized here (and this process unable to start it again).
      initialized_ = false;
      throw;
    }
    shutdown();
    throw;
  }
  TESSERA_LOG(kDebug, "nvshmem symmetric heap: ", capacity_bytes(), " bytes on cuda:", device);
}

NvshmemHeap::~NvshmemHeap() {
  shutdown();
}

void NvshmemHeap::shutdown() noexcept {
  if (!initialized_) {
    g_nvshmem_in_use = false;
    return;
  }
  // nvshmem_free and finalize are collective and touch the GPU. After a device-side trap the
  // context is lost and they could not complete, so NVSHMEM is left as is (the process is
  // going down with that error anyway).
  const cudaError_t query = cudaStreamQuery(nullptr);  // a lost context fails every call
  const bool context_lost =
      timeout_log().timed_out() || (query != cudaSuccess && query != cudaErrorNotReady);
  if (context_lost) {
    cudaGetLastError();
    TESSERA_LOG(kWarn, "rank ", rank(), ": NVSHMEM not finalized because the CUDA context is lost");
    initialized_ = false;
    return;
  }
  if (arena_) nvshmem_free(arena_);
  arena_ = nullptr;
  nvshmemx_hostlib_finalize();
  initialized_ = false;
  g_nvshmem_in_use = false;
}

void NvshmemHeap::direct_put(size_t dst_offset, const void* src, size_t bytes, int peer,
                             cudaStream_t stream) {
  nvshmemx_putmem_on_stream(local_base() + dst_offset, src, bytes, peer, stream);
}

void NvshmemHeap::direct_get(void* dst, size_t src_offset, size_t bytes, int peer,
                             cudaStream_t stream) {
  nvshmemx_getmem_on_stream(dst, local_base() + src_offset, bytes, peer, stream);
}

void NvshmemHeap::direct_put_with_signal(size_t dst_offset, const void* src, size_t bytes, int peer,
                                         int signal_word, SignalOp op, uint64_t value,
                                         cudaStream_t stream) {
  if (bytes == 0) {
    direct_signal(peer, signal_word, op, value, stream);
    return;
  }
  nvshmemx_putmem_signal_on_stream(local_base() + dst_offset, src, bytes,
                                   local_signal_word(signal_word), value, nvshmem_signal_op(op),
                                   peer, stream);
}

void NvshmemHeap::direct_signal(int peer, int signal_word, SignalOp op, uint64_t value,
                                cudaStream_t stream) {
  nvshmemx_signal_op_on_stream(local_signal_word(signal_word), value, nvshmem_signal_op(op), peer,
                               stream);
}

void NvshmemHeap::flush_puts(cudaStream_t stream) {
  nvshmemx_quiet_on_stream(stream);
}

}  // namespace tessera::cuda_comm
