// CudaSymmetricHeap: what the two cuda symmetric heaps (NVSHMEM, CUDA IPC) share.
//
// Each rank owns one arena of device memory at the same size on every rank:
//   [ signal words | user allocations ]
//   signal words: kNumUserSignalSlots user slots, then one barrier word per rank (the word of
//                 rank r at a peer holds the last barrier epoch r reached), then the rank's
//                 emulated NIC clocks (egress, ingress; paced_copy.h LinkClocks) and the clock
//                 probe words (a request word per rank, used at rank 0; two reply words),
//                 padded to 4 KiB.
//   user allocations: a bump allocator; SymmetricBuffer::offset is the offset in the arena, so
//                 a buffer sits at the same offset on every rank.
// The derived heap maps the arena (nvshmem_malloc, or cudaMalloc + IPC handles) and moves bytes
// between ranks of one machine; this class routes traffic to peers in another *emulated*
// machine through the paced copy (paced_copy.h) and signal kernels with the link's latency,
// and implements allocation, argument checks, bounded waits and the barrier with Tessera's own
// kernels (signal_kernels.h), so both heaps report timeouts the same way.
//
// Ordering contract: a put (or get) followed by a signal or barrier on the same stream is
// visible at the peer before the signal. Traffic on different streams is not ordered.
//
// Emulated links are shared: every paced transfer reserves time on the sender's egress and
// the receiver's ingress NIC clock, whichever GPU copies, so concurrent transfers through one
// emulated NIC (several streams, several peers) share its bandwidth. The clocks are on rank
// 0's %globaltimer; attach_arena measures each GPU's offset to it (clock_probe.h).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

#include <memory>
#include <string>
#include <vector>

#include "comm/cuda/paced_copy.h"
#include "comm/cuda/signal_kernels.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/comm/symmetric_heap.h"
#include "tessera/comm/topology.h"
#include "tessera/core/error.h"

namespace tessera::cuda_comm {

class CudaSymmetricHeap : public SymmetricHeap {
 public:
  static constexpr int kNumUserSignalSlots = 1024;
  static constexpr size_t kAllocationAlignment = 256;

  ~CudaSymmetricHeap() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kCuda; }
  std::string transport(int peer) const override;

  SymmetricBuffer allocate(size_t bytes) override;
  void release(const SymmetricBuffer& buffer) override;
  void* peer_ptr(const SymmetricBuffer& buffer, int peer) const override;

  void put(const SymmetricBuffer& dst, size_t dst_offset, const void* src, size_t bytes, int peer,
           const Stream& s) override;
  void get(void* dst, const SymmetricBuffer& src, size_t src_offset, size_t bytes, int peer,
           const Stream& s) override;
  // Paced peers: one pitched paced copy. Other peers: direct_put_2d / direct_get_2d.
  void put_2d(const SymmetricBuffer& dst, size_t dst_offset, size_t dst_pitch, const void* src,
              size_t src_pitch, size_t row_bytes, size_t rows, int peer, const Stream& s) override;
  void get_2d(void* dst, size_t dst_pitch, const SymmetricBuffer& src, size_t src_offset,
              size_t src_pitch, size_t row_bytes, size_t rows, int peer, const Stream& s) override;
  void put_with_signal(const SymmetricBuffer& dst, size_t dst_offset, const void* src, size_t bytes,
                       int peer, int signal_slot, SignalOp op, uint64_t value,
                       const Stream& s) override;
  void signal(int peer, int signal_slot, SignalOp op, uint64_t value, const Stream& s) override;
  void wait_signal(int signal_slot, WaitCmp cmp, uint64_t value, int from_rank,
                   const Stream& s) override;
  uint64_t read_signal(int signal_slot) const override;
  void barrier(const Stream& s) override;
  void check_errors() const override;
  int reserve_link(int src_rank, size_t bytes, const Stream& s) override;
  void hold_for_link(int token, const Stream& s) override;

  int device() const { return device_; }
  size_t capacity_bytes() const { return heap_bytes_; }
  // User signal slot `slot` of `peer` (this rank included) as this GPU can load/store it, for
  // kernels that spin on this rank's slots and stream memory operations that raise a peer's
  // (stream_memops.h); nullptr when the peer is not load/store reachable or its traffic is paced
  // (an emulated machine: only the heap's own calls keep to the emulated link).
  uint64_t* signal_word_address(int peer, int slot) const;
  // Where this heap's waits, and kernels waiting on its signals, record a timeout; check_errors()
  // throws what it holds.
  const WaitTimeoutLog& timeout_log() const { return *timeout_log_; }
  // True when traffic to `peer` crosses emulated machines (and so is paced).
  bool is_paced(int peer) const;
  // This GPU's %globaltimer offset to rank 0's, and the round trip it was measured with (0, 0
  // without emulated machines). Collective: re-measures on every rank.
  void calibrate_clock();
  int64_t clock_offset_ns() const { return clock_offset_ns_; }
  uint64_t clock_round_trip_ns() const { return clock_round_trip_ns_; }

 protected:
  // `topology` is the (possibly emulated) topology of the bootstrap's ranks; `bootstrap` must
  // outlive the heap.
  CudaSymmetricHeap(Bootstrap& bootstrap, const Topology& topology, int device, size_t heap_bytes);

  // Bytes of the arena every rank must allocate for `heap_bytes` of user memory.
  static size_t arena_bytes_for(size_t heap_bytes, int world_size);
  size_t arena_bytes() const { return arena_bytes_; }

  // Called by the derived constructor once the arena is mapped: `peer_bases[r]` is rank r's
  // arena as this GPU can load/store it (nullptr when not reachable; [rank()] = local). Zeroes
  // the signal words and waits for every rank (bootstrap barrier) so no signal is lost.
  void attach_arena(void* local_base, std::vector<void*> peer_bases);

  // Transfers between ranks of one machine. Offsets are arena offsets; `signal_word` indexes
  // the signal words (user slots first, then barrier words).
  virtual const char* transport_name() const = 0;
  virtual void direct_put(size_t dst_offset, const void* src, size_t bytes, int peer,
                          cudaStream_t stream) = 0;
  virtual void direct_get(void* dst, size_t src_offset, size_t bytes, int peer,
                          cudaStream_t stream) = 0;
  // Pitched transfers between ranks of one machine (rows > 0, row_bytes > 0). The default is
  // one cudaMemcpy2DAsync through the peer's mapped arena, or, for a peer with no mapping (an
  // NVSHMEM peer on another real host), one direct_put / direct_get per row.
  virtual void direct_put_2d(size_t dst_offset, size_t dst_pitch, const void* src, size_t src_pitch,
                             size_t row_bytes, size_t rows, int peer, cudaStream_t stream);
  virtual void direct_get_2d(void* dst, size_t dst_pitch, size_t src_offset, size_t src_pitch,
                             size_t row_bytes, size_t rows, int peer, cudaStream_t stream);
  virtual void direct_put_with_signal(size_t dst_offset, const void* src, size_t bytes, int peer,
                                      int signal_word, SignalOp op, uint64_t value,
                                      cudaStream_t stream) = 0;
  virtual void direct_signal(int peer, int signal_word, SignalOp op, uint64_t value,
                             cudaStream_t stream) = 0;
  // Makes the direct puts enqueued so far on `stream` complete at their targets before later
  // work on the stream (called before signal() and barrier() signal); a no-op where puts are
  // plain copies that complete in stream order.
  virtual void flush_puts(cudaStream_t /*stream*/) {}

  // For derived classes' messages and checks.
  Bootstrap& bootstrap() const { return bootstrap_; }
  const Topology& topology() const { return topology_; }
  unsigned char* local_base() const { return local_base_; }
  unsigned char* peer_base(int peer) const { return peer_bases_[peer]; }
  uint64_t* local_signal_word(int signal_word) const { return signals_ + signal_word; }
  // Byte offset of a signal word in the arena.
  static size_t signal_word_offset(int signal_word) { return size_t(signal_word) * 8; }
  int barrier_word(int of_rank) const { return kNumUserSignalSlots + of_rank; }
  int nic_clock_word(bool ingress) const { return kNumUserSignalSlots + size_ + (ingress ? 1 : 0); }
  int probe_request_word(int of_rank) const { return kNumUserSignalSlots + size_ + 2 + of_rank; }
  int probe_reply_word() const { return kNumUserSignalSlots + 2 * size_ + 2; }  // and the next
  // Throws the recorded device timeout if any, else kCuda for `error` at `what`.
  [[noreturn]] void fail_cuda(cudaError_t error, const char* what) const;
  // The cudaStream_t of `s`, checked to be a cuda stream on this heap's device.
  cudaStream_t stream_of(const Stream& s, const char* op) const;
  // Writes `value` into `peer`'s signal word through the peer mapping (a kernel), after
  // `delay_ns`.
  void kernel_signal(int peer, int signal_word, SignalOp op, uint64_t value, uint64_t delay_ns,
                     cudaStream_t stream) const;

 private:
  void check_buffer(const SymmetricBuffer& buffer, const char* op, const char* what) const;
  unsigned char* require_peer_base(int peer, const char* op) const;
  uint64_t latency_ns() const;
  // The NIC clocks of a paced transfer from `src_rank` to `dst_rank` (one of them is this rank).
  LinkClocks link_clocks(int src_rank, int dst_rank, const char* op) const;
  bool has_emulated_machines() const;

  Bootstrap& bootstrap_;
  Topology topology_;
  int rank_;
  int size_;
  int device_;
  size_t heap_bytes_;
  size_t arena_bytes_;
  size_t user_begin_;
  size_t next_offset_;
  int num_allocations_ = 0;
  struct Allocation {
    size_t offset, end;
    bool released;
  };
  std::vector<Allocation> live_;  // in allocation order; the top is popped once released
  unsigned char* local_base_ = nullptr;
  std::vector<unsigned char*> peer_bases_;
  uint64_t* signals_ = nullptr;
  int64_t barrier_epoch_ = 0;
  std::unique_ptr<WaitTimeoutLog> timeout_log_;
  int64_t clock_offset_ns_ = 0;
  uint64_t clock_round_trip_ns_ = 0;
  uint64_t clock_probe_rounds_ = 0;  // probe numbers used so far (the same on every rank)
  // reserve_link's release times, a ring of kLinkReleaseWords device words; a token is an
  // index (a word is reused kLinkReleaseWords reservations later, long after its hold ran).
  static constexpr int kLinkReleaseWords = 4096;
  unsigned long long* link_release_ = nullptr;
  int next_link_token_ = 0;
};

// Collective: every rank passes "" on success or its error message. Throws `code` on every
// rank when any rank failed, naming the first failing rank, its message and `stage`, so ranks
// never diverge (some continuing into a collective the others left).
void agree_on_success(Bootstrap& bootstrap, const std::string& local_error, ErrorCode code,
                      const std::string& stage);

// Checks a CUDA call made by a heap: on failure reports a recorded device timeout first.
#define TESSERA_HEAP_CUDA_CHECK(expr)                                          \
  do {                                                                         \
    cudaError_t tessera_heap_err_ = (expr);                                    \
    if (tessera_heap_err_ != cudaSuccess) fail_cuda(tessera_heap_err_, #expr); \
  } while (0)

}  // namespace tessera::cuda_comm
