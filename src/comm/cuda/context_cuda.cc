// create_cuda_context: one process per GPU. The order matters:
//   1. the device (= the launcher's local rank) becomes current;
//   2. the topology is detected, then regrouped into emulated machines when asked;
//   3. the world NCCL communicator, which sets NCCL_HOSTID per emulated machine before the
//      process' first NCCL call (NCCL reads it once);
//   4. the symmetric heap: "nvshmem", "ipc", or "auto" (NVSHMEM, falling back to IPC with a
//      warning when NVSHMEM cannot start; every rank takes the same branch);
//   5. the rank's default stream.
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "comm/cuda/ipc_heap.h"
#include "comm/cuda/nccl_communicator.h"
#include "comm/cuda/nvshmem_heap.h"
#include "tessera/comm/context.h"
#include "tessera/comm/emulation.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera {

namespace {

std::unique_ptr<SymmetricHeap> create_heap(Bootstrap& bootstrap, const Topology& topology,
                                           int device, const ContextOptions& options) {
  const std::string& transport = options.heap_transport;
  if (transport == "ipc") {
    return std::make_unique<cuda_comm::IpcHeap>(bootstrap, topology, device, options.heap_bytes);
  }
  if (transport == "nvshmem") {
    return std::make_unique<cuda_comm::NvshmemHeap>(bootstrap, topology, device,
                                                    options.heap_bytes);
  }
  // "auto". NvshmemHeap agrees across ranks before and after each collective step, so a
  // failure it reports is reported on every rank and they all fall back together.
  try {
    return std::make_unique<cuda_comm::NvshmemHeap>(bootstrap, topology, device,
                                                    options.heap_bytes);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported && e.code() != ErrorCode::kNvshmem) throw;
    TESSERA_LOG(kWarn, "NVSHMEM symmetric heap unavailable (", e.what(),
                "); falling back to CUDA IPC");
  }
  return std::make_unique<cuda_comm::IpcHeap>(bootstrap, topology, device, options.heap_bytes);
}

}  // namespace

std::unique_ptr<RankContext> create_cuda_context(std::unique_ptr<Bootstrap> bootstrap,
                                                 const ContextOptions& options) {
  TESSERA_CHECK_ARG(bootstrap != nullptr, "create_cuda_context: bootstrap is null");
  TESSERA_CHECK_ARG(options.emulate_machines >= 1, "emulate_machines = ", options.emulate_machines,
                    ": expected >= 1");
  TESSERA_CHECK_ARG(options.heap_transport == "auto" || options.heap_transport == "nvshmem" ||
                        options.heap_transport == "ipc",
                    "heap_transport = '", options.heap_transport,
                    "': expected auto, nvshmem or ipc");
  TESSERA_CHECK_ARG(!options.create_heap || options.heap_bytes > 0,
                    "heap_bytes = 0: expected the size of the symmetric heap (or create_heap = "
                    "false)");
  const int rank = bootstrap->rank();
  set_thread_rank(rank);

  const int local_rank = bootstrap->local_rank();
  int visible = 0;
  cudaError_t count_error = cudaGetDeviceCount(&visible);
  if (count_error != cudaSuccess) {
    cudaGetLastError();
    visible = 0;
  }
  TESSERA_CHECK_ARG(local_rank >= 0 && local_rank < visible, "local rank ", local_rank,
                    " has no GPU: ", visible, " visible",
                    count_error != cudaSuccess
                        ? str(" (cudaGetDeviceCount: ", cudaGetErrorString(count_error), ")")
                        : std::string());
  const int device = local_rank;
  TESSERA_CUDA_CHECK(cudaSetDevice(device));

  auto context = std::make_unique<RankContext>();
  context->rank = rank;
  context->size = bootstrap->size();
  context->backend = Backend::kCuda;
  context->device = Device::cuda(device);
  context->options = options;

  Topology topology = detect_topology(*bootstrap, device);
  if (options.emulate_machines > 1) {
    topology = emulate_machines(topology, options.emulate_machines, options.emulated_link);
  }
  context->topology = topology;
  context->world =
      cuda_comm::NcclCommunicator::create_world(*bootstrap, context->topology, device, "world");
  if (options.create_heap) {
    context->heap = create_heap(*bootstrap, context->topology, device, options);
  }
  context->stream = Stream::create_cuda(device);
  // The world communicator and heap refer to the bootstrap; the context owns it and destroys it
  // after them (member order).
  context->bootstrap = std::move(bootstrap);
  TESSERA_LOG(kInfo, "rank ", rank, " of ", context->size, " on cuda:", device,
              context->heap ? str(", heap ", context->heap->transport(rank)) : std::string(),
              context->topology.emulated
                  ? str(", ", context->topology.num_machines(), " emulated machines")
                  : std::string());
  return context;
}

// Declared in src/comm/context.cc, which dispatches create_symmetric_heap() here.
std::unique_ptr<SymmetricHeap> create_cuda_symmetric_heap(RankContext& ctx,
                                                          const std::string& transport,
                                                          size_t bytes) {
  TESSERA_CHECK_ARG(ctx.backend == Backend::kCuda && ctx.bootstrap != nullptr,
                    "create_symmetric_heap(\"", transport,
                    "\"): expected a context made by create_cuda_context");
  TESSERA_CHECK_ARG(transport == "auto" || transport == "nvshmem" || transport == "ipc",
                    "create_symmetric_heap: transport = '", transport,
                    "': expected nvshmem, ipc or auto (NVSHMEM is one heap per process)");
  TESSERA_CHECK_ARG(bytes > 0, "create_symmetric_heap: bytes = 0: expected > 0");
  TESSERA_CUDA_CHECK(cudaSetDevice(ctx.device.index));
  ContextOptions options = ctx.options;
  options.heap_transport = transport;
  options.heap_bytes = bytes;
  return create_heap(*ctx.bootstrap, ctx.topology, ctx.device.index, options);
}

}  // namespace tessera
