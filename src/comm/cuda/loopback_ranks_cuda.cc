// LoopbackRanks on the cuda backend (tessera/comm/loopback.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "comm/cpu/rank_threads.h"
#include "comm/cpu/thread_bootstrap.h"
#include "comm/cuda/ipc_heap.h"
#include "tessera/comm/loopback.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera {

struct LoopbackRanks::Impl {
  std::shared_ptr<cpu::FailureState> failure;
  std::vector<std::unique_ptr<RankContext>> contexts;
};

namespace {

// One machine of `p` ranks on GPU `device`.
Topology loopback_topology(int p, int device) {
  Topology t = cpu_topology(p, 1);
  t.device_of_rank.assign(size_t(p), device);
  t.host_name.assign(size_t(p), "loopback");
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b)
      t.links[size_t(a * p + b)] = a == b ? LinkClass::kSelf : LinkClass::kNVLink;
  return t;
}

}  // namespace

LoopbackRanks::LoopbackRanks(int world_size, Device gpu, ContextOptions options)
    : impl_(std::make_unique<Impl>()) {
  TESSERA_CHECK_ARG(world_size >= 1, "LoopbackRanks: world_size = ", world_size, ": expected >= 1");
  TESSERA_CHECK(gpu.is_cuda() && gpu.index < cuda_device_count(), ErrorCode::kUnsupported,
                "LoopbackRanks: device = ", gpu.to_string(), ": expected one of the ",
                cuda_device_count(), " visible GPUs");
  TESSERA_CHECK_ARG(options.rank_sms >= 0, "LoopbackRanks: options.rank_sms = ", options.rank_sms,
                    ": expected >= 0 (0: 1/P of the GPU)");
  TESSERA_CHECK_ARG(options.emulate_machines == 1,
                    "LoopbackRanks: options.emulate_machines = ", options.emulate_machines,
                    ": expected 1 (loopback ranks are one machine)");
  if (options.rank_sms == 0) {
    int sms = 0;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu.index));
    options.rank_sms = world_size == 1 ? sms : std::max(1, sms / world_size - 1);
  }
  Impl& im = *impl_;
  im.failure = std::make_shared<cpu::FailureState>(world_size);
  std::vector<int> ranks(static_cast<size_t>(world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto world = std::make_shared<cpu::CpuWorld>("loopback", ranks, im.failure);
  const Topology topology = loopback_topology(world_size, gpu.index);
  im.contexts.resize(size_t(world_size));
  cpu::run_rank_threads(world_size, im.failure, [&](int r) {
    TESSERA_CUDA_CHECK(cudaSetDevice(gpu.index));
    auto ctx = std::make_unique<RankContext>();
    ctx->rank = r;
    ctx->size = world_size;
    ctx->backend = Backend::kCuda;
    ctx->device = gpu;
    ctx->topology = topology;
    ctx->options = options;
    ctx->bootstrap = std::make_unique<cpu::ThreadBootstrap>(world, r);
    if (options.create_heap) {
      ctx->heap = std::make_unique<cuda_comm::IpcHeap>(*ctx->bootstrap, topology, gpu.index,
                                                       options.heap_bytes);
    }
    ctx->stream = Stream::create_cuda(gpu.index);
    im.contexts[size_t(r)] = std::move(ctx);
  });
}

LoopbackRanks::~LoopbackRanks() {
  if (!impl_ || impl_->contexts.empty() || !impl_->contexts.front()) return;
  // The heaps free their arenas: no rank's work may still use them.
  cudaSetDevice(impl_->contexts.front()->device.index);
  cudaDeviceSynchronize();
  cudaGetLastError();
  // The heaps before the bootstraps they refer to (RankContext's member order).
  impl_->contexts.clear();
}

int LoopbackRanks::size() const {
  return int(impl_->contexts.size());
}

RankContext& LoopbackRanks::context(int rank) {
  TESSERA_CHECK_ARG(rank >= 0 && rank < size(), "LoopbackRanks::context(rank = ", rank,
                    "): expected 0 to ", size() - 1);
  return *impl_->contexts[size_t(rank)];
}

void LoopbackRanks::run_each(const std::function<void(RankContext&)>& body) {
  Impl& im = *impl_;
  const int device = im.contexts.front()->device.index;
  cpu::run_rank_threads(size(), im.failure, [&](int r) {
    TESSERA_CUDA_CHECK(cudaSetDevice(device));
    body(*im.contexts[size_t(r)]);
  });
}

}  // namespace tessera
