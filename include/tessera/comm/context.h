// RankContext: what one rank needs to run distributed work: its bootstrap, topology, world
// communicator, symmetric heap and a default stream. Made by create_cuda_context() (one
// process per GPU), run_cpu_ranks() (cpu ranks as threads of this process) or LoopbackRanks
// (cuda ranks as threads of this process on one GPU, comm/loopback.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessera/comm/bootstrap.h"
#include "tessera/comm/communicator.h"
#include "tessera/comm/symmetric_heap.h"
#include "tessera/comm/topology.h"
#include "tessera/runtime/stream.h"

namespace tessera {

struct ContextOptions {
  int emulate_machines = 1;      // > 1: regroup the ranks into this many emulated machines
  LinkSpec emulated_link;        // the cross-machine link of emulated machines
  size_t heap_bytes = 1ull << 30;
  std::string heap_transport = "auto";  // "nvshmem", "ipc", "auto" (nvshmem, else ipc)
  bool create_heap = true;
  // Multiprocessors one rank's kernels may occupy at once (0: all of them). Loopback ranks
  // (comm/loopback.h) share one GPU and get 1/P of it each.
  int rank_sms = 0;
};

struct RankContext {
  int rank = 0;
  int size = 1;
  Backend backend = Backend::kCpu;
  Device device{};
  Topology topology;
  std::unique_ptr<Bootstrap> bootstrap;  // null for cpu ranks
  std::unique_ptr<Communicator> world;
  std::unique_ptr<SymmetricHeap> heap;
  Stream stream;
  ContextOptions options;
};

// One process per GPU: device = local rank. Collective over the bootstrap's ranks.
std::unique_ptr<RankContext> create_cuda_context(std::unique_ptr<Bootstrap> bootstrap,
                                                 const ContextOptions& options);

// A further symmetric heap for `ctx`'s ranks ("nvshmem" or "ipc" on cuda, "cpu" on cpu), e.g.
// to compare transports side by side. Collective over ctx's ranks.
std::unique_ptr<SymmetricHeap> create_symmetric_heap(RankContext& ctx, const std::string& transport,
                                                     size_t bytes);

// Runs `body` on `world_size` threads, each a rank of the cpu backend, split evenly into
// `num_machines` machines. Every rank's exception is collected; the first (by rank) is
// rethrown after all threads ended, with the other ranks' messages appended.
void run_cpu_ranks(int world_size, int num_machines, const ContextOptions& options,
                   const std::function<void(RankContext&)>& body);

}  // namespace tessera
