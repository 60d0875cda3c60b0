// run_cpu_ranks: runs a body on N threads, each a rank of the cpu backend with its own
// RankContext (world communicator, symmetric heap, inline cpu stream), and turns the ranks'
// exceptions into one tessera::Error.
//
// When a rank's body throws, the rank is marked failed in the run's FailureState, so ranks
// waiting for it stop with kPeerFailure (naming it and its message) instead of waiting out
// the timeout. The error rethrown is the lowest rank's root cause: errors that only report
// another rank's failure (kPeerFailure) are passed over when a rank has a first-hand error.
#include <numeric>
#include <vector>

#include "comm/cpu/cpu_communicator.h"
#include "comm/cpu/cpu_fault.h"
#include "comm/cpu/cpu_symmetric_heap.h"
#include "comm/cpu/cpu_world.h"
#include "comm/cpu/rank_threads.h"
#include "tessera/comm/context.h"
#include "tessera/core/error.h"

namespace tessera {

void run_cpu_ranks(int world_size, int num_machines, const ContextOptions& options,
                   const std::function<void(RankContext&)>& body) {
  TESSERA_CHECK_ARG(world_size >= 1, "run_cpu_ranks: world_size = ", world_size, ": expected >= 1");
  TESSERA_CHECK_ARG(bool(body), "run_cpu_ranks: body is empty");
  Topology topology = cpu_topology(world_size, num_machines);
  topology.cross_link = options.emulated_link;
  const cpu::FaultSpec faults = cpu::fault_spec_from_params(world_size);

  auto failure = std::make_shared<cpu::FailureState>(world_size);
  std::vector<int> ranks(world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  auto world = std::make_shared<cpu::CpuWorld>("world", ranks, failure);
  std::shared_ptr<cpu::CpuHeapShared> heap;
  if (options.create_heap) {
    heap = std::make_shared<cpu::CpuHeapShared>(topology, options.heap_bytes, failure);
  }

  cpu::run_rank_threads(world_size, failure, [&](int r) {
    cpu::ScopedRankFaults scoped_faults(faults, r);
    RankContext ctx;
    ctx.rank = r;
    ctx.size = world_size;
    ctx.backend = Backend::kCpu;
    ctx.device = Device::cpu();
    ctx.topology = topology;
    ctx.world = std::make_unique<cpu::CpuCommunicator>(world, r);
    if (heap) ctx.heap = std::make_unique<cpu::CpuSymmetricHeap>(heap, r);
    ctx.stream = Stream::cpu();
    ctx.options = options;
    body(ctx);
  });
}

}  // namespace tessera
