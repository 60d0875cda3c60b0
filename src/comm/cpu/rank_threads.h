// Runs a body on N threads of this process, one per rank, and turns the ranks' exceptions into
// one tessera::Error: what run_cpu_ranks and the loopback ranks (comm/loopback.h) share.
#pragma once

#include <functional>
#include <memory>

#include "comm/cpu/cpu_world.h"

namespace tessera::cpu {

// Runs body(rank) for every rank of `failure`'s run on its own thread and joins them. A rank
// whose body throws is marked failed in `failure`, so ranks waiting for it in a collective stop
// with kPeerFailure instead of waiting out the timeout. Afterwards the lowest rank's first-hand
// error (kPeerFailure only when no rank has another) is rethrown, the other ranks' messages
// appended.
void run_rank_threads(int world_size, const std::shared_ptr<FailureState>& failure,
                      const std::function<void(int rank)>& body);

}  // namespace tessera::cpu
