#include "tp/cuda/peer_words.h"

#include <cuda_runtime.h>

#include "comm/cuda/stream_memops.h"
#include "tessera/comm/agreement.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::tp::detail {

PeerWords::PeerWords(RankContext& ctx, int signal_base, int count, const char* who)
    : base_(signal_base),
      rank_(ctx.rank),
      who_(who),
      released_what_(str(who, ": a released word")) {
  heap_ = dynamic_cast<cuda_comm::CudaSymmetricHeap*>(ctx.heap.get());
  TESSERA_CHECK(heap_ != nullptr, ErrorCode::kUnsupported, who,
                ": expected the context's heap to be a cuda symmetric heap (nvshmem or ipc)");
  for (int q = 0; q < ctx.size; ++q) {
    uint64_t* words = heap_->signal_word_address(q, signal_base);
    TESSERA_CHECK(words != nullptr, ErrorCode::kUnsupported, "rank ", ctx.rank, ": ", who,
                  ": rank ", q, " is not load/store reachable through the ", heap_->transport(q),
                  " heap (another host or an emulated machine); expected the GPUs of one "
                  "machine, or an unfused plan");
    words_.push_back(words);
  }
  TESSERA_CUDA_CHECK(cudaSetDevice(ctx.device.index));
  TESSERA_CUDA_CHECK(cudaMemset(words_[size_t(ctx.rank)], 0, size_t(count) * sizeof(uint64_t)));
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  const uint64_t zeroed[1] = {1};
  (void)all_gather_words(ctx, zeroed);
}

std::byte* PeerWords::buffer(const SymmetricBuffer& buffer, int rank) const {
  void* p = heap_->peer_ptr(buffer, rank);
  TESSERA_CHECK(p != nullptr, ErrorCode::kUnsupported, who_, ": rank ", rank,
                "'s buffer is not load/store reachable through the ", heap_->transport(rank),
                " heap; expected the GPUs of one machine, or an unfused plan");
  return static_cast<std::byte*>(p);
}

void PeerWords::release_to_peers(cudaStream_t stream, int slot, uint64_t epoch) const {
  const int p = int(words_.size());
  for (int i = 1; i < p; ++i)
    cuda_comm::stream_write_value64(stream, word((rank_ + i) % p, slot), epoch,
                                    released_what_.c_str());
}

void PeerWords::wait_released(cudaStream_t stream, int slot, uint64_t epoch) const {
  cuda_comm::stream_wait_value64_geq(stream, word(rank_, slot), epoch, released_what_.c_str());
}

void PeerWords::send_to_owner(const Stream& stream, const Stream& side, Event& computed, int owner,
                              int released_slot, int count_slot, uint64_t epoch,
                              const std::function<void(cudaStream_t)>& copy,
                              const char* what) const {
  const auto on = static_cast<cudaStream_t>(side.cuda_stream());
  computed.record(stream);
  computed.wait_on(side);
  wait_released(on, released_slot, epoch - 1);
  copy(on);
  cuda_comm::stream_write_value64(on, word(owner, count_slot), epoch, what);
}

}  // namespace tessera::tp::detail
