// CpuSymmetricHeap: the SymmetricHeap of the cpu backend. Each rank owns one host arena of
// options.heap_bytes (reserved address space, committed as it is touched); allocate() hands
// out the same offset on every rank, so a peer's copy of a buffer is at
// arena(peer) + offset. put/get are memcpy into/out of the peer's arena; signals are
// 64-bit atomics per rank and slot, written with release order after the data and read with
// acquire order, so a rank that sees a signal also sees the data put before it.
//
// Across emulated machines (topology links of class kEmulatedNetwork) transfers are paced to
// the emulated link: the call returns no earlier than latency + bytes / bandwidth after it
// started (comm/emulation.h), and peer_ptr() returns nullptr, as real machines cannot load or
// store each other's memory. Each rank has one emulated NIC, shared by everything it sends
// (egress) and receives (ingress): a transfer occupies the sender's egress and the receiver's
// ingress from max(now, both free) for bytes / bandwidth, as the sim's link model does.
// Signals carry the latency only. wait_signal and barrier are bounded by wait_timeout_ms() and stop
// early with kPeerFailure when the rank they wait for failed. A slot's value does not say who
// raised it, so each slot also counts its raises per source rank: a wait that any rank may
// satisfy (a signal barrier) names, when it times out, the ranks that raised it fewest times.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/cpu/cpu_world.h"
#include "tessera/comm/symmetric_heap.h"
#include "tessera/comm/topology.h"

namespace tessera::cpu {

// Signal slots per rank on the cpu backend.
constexpr int kCpuSignalSlots = 1024;
// Alignment of every allocation inside the heap.
constexpr size_t kCpuHeapAlignment = 256;

// The arenas, signal words and rendezvous all ranks of a cpu run share.
class CpuHeapShared {
 public:
  CpuHeapShared(const Topology& topology, size_t heap_bytes, std::shared_ptr<FailureState> failure);
  ~CpuHeapShared();
  CpuHeapShared(const CpuHeapShared&) = delete;
  CpuHeapShared& operator=(const CpuHeapShared&) = delete;

  int size() const { return topology_.world_size; }
  size_t heap_bytes() const { return heap_bytes_; }
  const Topology& topology() const { return topology_; }
  std::byte* arena(int rank) const { return arenas_[rank]; }
  std::atomic<uint64_t>& signal_word(int rank, int slot) const { return signals_[rank][slot]; }
  CpuWorld& world() { return world_; }
  // Reserves the emulated NICs for `bytes` from `src_rank` to `dst_rank`, starting no earlier
  // than `now`; returns when the last byte arrives (end of the reservation + latency).
  CpuWorld::Clock::time_point reserve_link(int src_rank, int dst_rank, size_t bytes,
                                           CpuWorld::Clock::time_point now);
  // Counts a raise of `dst_rank`'s signal `slot` by `src_rank`. A wait that several ranks
  // may satisfy (a signal barrier) cannot tell from the slot's value who is missing; on a
  // timeout it names the ranks that raised the slot fewest times (raises()).
  void count_raise(int dst_rank, int slot, int src_rank);
  // Raises of `dst_rank`'s `slot` so far, per source rank (all 0 before the first).
  std::vector<uint32_t> raises(int dst_rank, int slot) const;

 private:
  Topology topology_;
  size_t heap_bytes_;
  std::vector<std::byte*> arenas_;
  std::vector<std::unique_ptr<std::atomic<uint64_t>[]>> signals_;
  CpuWorld world_;  // rendezvous of allocate() and barrier(), apart from the communicators'
  std::mutex link_mutex_;
  std::vector<CpuWorld::Clock::time_point> egress_free_, ingress_free_;  // per rank's NIC
  // [rank * kCpuSignalSlots + slot] -> per-source raise counts, allocated on the first raise
  // (most slots are never raised, and size() x size() counters per slot would not fit).
  std::unique_ptr<std::atomic<std::atomic<uint32_t>*>[]> raise_counts_;
  std::mutex raise_mutex_;  // allocation only
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> raise_storage_;
};

class CpuSymmetricHeap final : public SymmetricHeap {
 public:
  CpuSymmetricHeap(std::shared_ptr<CpuHeapShared> shared, int rank);

  int rank() const override { return rank_; }
  int size() const override { return shared_->size(); }
  Backend backend() const override { return Backend::kCpu; }
  std::string transport(int peer) const override;

  SymmetricBuffer allocate(size_t bytes) override;
  void* peer_ptr(const SymmetricBuffer& buffer, int peer) const override;

  void put(const SymmetricBuffer& dst, size_t dst_offset, const void* src, size_t bytes, int peer,
           const Stream& s) override;
  void get(void* dst, const SymmetricBuffer& src, size_t src_offset, size_t bytes, int peer,
           const Stream& s) override;
  // A memcpy per row, paced once for rows * row_bytes.
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
  void check_errors() const override {}  // cpu waits throw where they time out
  int reserve_link(int src_rank, size_t bytes, const Stream& s) override;
  void hold_for_link(int token, const Stream& s) override;

 private:
  bool crosses_machine(int peer) const;
  // Checks that `buffer` came from this heap's allocate().
  void check_owned(const SymmetricBuffer& buffer, const char* op) const;
  // Returns no earlier than the emulated link would deliver `bytes` sent from `src_rank` to
  // `dst_rank` at `start` (one of them is this rank; same-machine traffic returns at once).
  void pace(int src_rank, int dst_rank, size_t bytes, CpuWorld::Clock::time_point start) const;
  void update_signal(int peer, int signal_slot, SignalOp op, uint64_t value);
  // For the timeout of a wait several ranks may satisfy: "; raises of the slot so far (...):
  // waiting for rank(s) ..." naming the awaited ranks that raised it fewest times.
  std::string behind(int signal_slot, const std::vector<int>& awaited) const;
  static void sleep_until(CpuWorld::Clock::time_point until);

  std::shared_ptr<CpuHeapShared> shared_;
  int rank_;
  size_t next_offset_ = 0;
  uint64_t num_collectives_ = 0;
  // reserve_link's release times, a ring (a token is reused kLinkReleaseTokens later).
  static constexpr int kLinkReleaseTokens = 4096;
  std::vector<CpuWorld::Clock::time_point> link_release_ =
      std::vector<CpuWorld::Clock::time_point>(kLinkReleaseTokens);
  int next_link_token_ = 0;
};

}  // namespace tessera::cpu
