// What a fused tensor-parallel operation on cuda needs of the context's symmetric heap: the
// cuda heap itself, its buffers and its signal words at every rank of one machine as this GPU
// stores into them (copies, kernels and stream memory operations), for a range of slots that
// the operation holds. The words carry the epoch of the call that last raised them; they are
// zeroed once, when the operation is made (every rank, then an agreement, so no rank's first
// signal precedes a peer's zeroing).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/cuda/cuda_heap.h"
#include "tessera/comm/context.h"
#include "tessera/runtime/stream.h"

namespace tessera::tp::detail {

class PeerWords {
 public:
  // Throws kUnsupported naming `who` when the heap is not a cuda heap or a peer is not load/
  // store reachable (another host, an emulated machine's paced peer).
  PeerWords(RankContext& ctx, int signal_base, int count, const char* who);

  cuda_comm::CudaSymmetricHeap& heap() const { return *heap_; }
  int base() const { return base_; }  // heap slot of plan slot 0
  // `rank`'s word of plan slot `slot`.
  uint64_t* word(int rank, int slot) const { return words_[size_t(rank)] + slot; }
  // `rank`'s copy of `buffer`, as this GPU stores into it.
  std::byte* buffer(const SymmetricBuffer& buffer, int rank) const;
  // The released words (plan.h, released_signal), by stream memory operations: after the work
  // enqueued on `stream` so far, this rank's word `slot` raised to `epoch` at every peer; and
  // the work enqueued on `stream` after wait_released held until this rank's word `slot`
  // reaches `epoch` (no timeout of the driver's: the caller says what bounds it).
  void release_to_peers(cudaStream_t stream, int slot, uint64_t epoch) const;
  void wait_released(cudaStream_t stream, int slot, uint64_t epoch) const;

  // The owner protocol of GEMM+ReduceScatter and GEMM+AllToAll: on `side`, once the work
  // enqueued on `stream` so far is done (`computed` marks it), wait until `owner` released its
  // buffer (its word `released_slot` at epoch - 1), enqueue `copy` on `side` (it may enqueue
  // nothing), then raise `owner`'s word `count_slot` to `epoch`. `what` names the word.
  void send_to_owner(const Stream& stream, const Stream& side, Event& computed, int owner,
                     int released_slot, int count_slot, uint64_t epoch,
                     const std::function<void(cudaStream_t)>& copy, const char* what) const;

 private:
  cuda_comm::CudaSymmetricHeap* heap_ = nullptr;
  int base_ = 0, rank_ = 0;
  const char* who_ = "";
  std::string released_what_;  // names the released words in a driver's refusal
  std::vector<uint64_t*> words_;
};

}  // namespace tessera::tp::detail
