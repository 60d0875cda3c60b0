// LoopbackRanks: P cuda ranks as threads of one process, all on one GPU, so what runs across
// GPUs (the fused tensor-parallel operations: their symmetric heap, signal words, copies and
// waits) runs on a one-GPU machine, every peer's buffer in the same device memory. Each rank
// has a RankContext like create_cuda_context's, except:
//   bootstrap  a "thread" bootstrap (bounded, naming missing ranks, like every other);
//   heap       the ipc heap in its in-process form, transport "loopback" (the peers' arenas
//              are plain device pointers of this process);
//   world      none: NCCL takes one rank per GPU, so work that needs a device communicator
//              (the unfused pairs) is refused, naming it;
//   topology   one machine of P ranks on the same GPU, NVLink-class links;
//   options.rank_sms  1/P of the multiprocessors, less one left to copies, unless set: each
//              rank's kernels stay on that many, as if each rank had its own small GPU (a
//              rank's kernel that spins on a signal could otherwise hold every multiprocessor
//              and starve the copy it waits for, when a copy within one GPU runs as a kernel).
// Timings are P ranks sharing one GPU's memory bandwidth, not P GPUs: loopback checks
// correctness and what the protocols cost.
#pragma once

#include <functional>
#include <memory>

#include "tessera/comm/context.h"

namespace tessera {

class LoopbackRanks {
 public:
  // Collective set-up on P threads. Throws kUnsupported without a cuda build or when `gpu` is
  // not a GPU, kInvalidArgument for world_size < 1.
  LoopbackRanks(int world_size, Device gpu, ContextOptions options = {});
  ~LoopbackRanks();
  LoopbackRanks(const LoopbackRanks&) = delete;
  LoopbackRanks& operator=(const LoopbackRanks&) = delete;

  int size() const;
  RankContext& context(int rank);

  // Runs body(context(r)) for every rank r at once, each on its own thread: for collective
  // calls (making an operation, allocating from the heap). A rank's exception makes the ranks
  // waiting for it stop (kPeerFailure); the lowest rank's own error is rethrown, as by
  // run_cpu_ranks; after it the ranks are spent (their collectives fail with kPeerFailure).
  // Calls that are not collective (an operation's run) need no threads.
  void run_each(const std::function<void(RankContext&)>& body);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
