// run_cpu_ranks: runs a body on N threads, each a rank of the cpu backend with its own
// RankContext (world communicator, symmetric heap, inline cpu stream), and turns the ranks'
// exceptions into one tessera::Error.
//
// When a rank's body throws, the rank is marked failed in the run's FailureState, so ranks
// waiting for it stop with kPeerFailure (naming it and its message) instead of waiting out
// the timeout. The error rethrown is the lowest rank's root cause: errors that only report
// another rank's failure (kPeerFailure) are passed over when a rank has a first-hand error.
#include <exception>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/cpu/cpu_communicator.h"
#include "comm/cpu/cpu_fault.h"
#include "comm/cpu/cpu_symmetric_heap.h"
#include "comm/cpu/cpu_world.h"
#include "tessera/comm/context.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"

namespace tessera {

namespace {

struct RankOutcome {
  bool failed = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // without the "tessera rank N: <code>: " prefix
};

// Error::what() starts with "tessera rank N: <code name>: " (or "tessera: <code name>: ").
std::string without_prefix(const Error& e) {
  const std::string s = e.what();
  const std::string code_part = str(error_code_name(e.code()), ": ");
  const size_t pos = s.find(code_part);
  if (s.rfind("tessera", 0) == 0 && pos != std::string::npos) {
    return s.substr(pos + code_part.size());
  }
  return s;
}

}  // namespace

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

  std::vector<RankOutcome> outcomes(world_size);
  auto run_rank = [&](int r) {
    set_thread_rank(r);
    cpu::ScopedRankFaults scoped_faults(faults, r);
    try {
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
    } catch (const Error& e) {
      outcomes[r] = {true, e.code(), without_prefix(e)};
      failure->mark_failed(r, e.what());
    } catch (const std::exception& e) {
      outcomes[r] = {true, ErrorCode::kInternal, str("non-tessera exception: ", e.what())};
      failure->mark_failed(r, e.what());
    } catch (...) {
      outcomes[r] = {true, ErrorCode::kInternal, "unknown exception"};
      failure->mark_failed(r, "unknown exception");
    }
    set_thread_rank(-1);
  };

  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int r = 0; r < world_size; ++r) {
    try {
      threads.emplace_back(run_rank, r);
    } catch (const std::exception& e) {
      // The ranks already started will wait for this one; mark it failed so they stop.
      outcomes[r] = {true, ErrorCode::kSystem, str("could not start its thread: ", e.what())};
      failure->mark_failed(r, outcomes[r].message);
    }
  }
  for (auto& t : threads) t.join();

  int chosen = -1;
  for (int r = 0; r < world_size && chosen < 0; ++r) {
    if (outcomes[r].failed && outcomes[r].code != ErrorCode::kPeerFailure) chosen = r;
  }
  for (int r = 0; r < world_size && chosen < 0; ++r) {
    if (outcomes[r].failed) chosen = r;
  }
  if (chosen < 0) return;

  std::string message = str("rank ", chosen, ": ", outcomes[chosen].message);
  for (int r = 0; r < world_size; ++r) {
    if (r == chosen || !outcomes[r].failed) continue;
    message +=
        str("\n  rank ", r, ": ", error_code_name(outcomes[r].code), ": ", outcomes[r].message);
  }
  throw_error(outcomes[chosen].code, message);
}

}  // namespace tessera
