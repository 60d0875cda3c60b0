// SymmetricHeap: memory every rank allocates at the same offsets, written and read one-sided.
// Backends: NVSHMEM (nvshmem_malloc, nvshmemx_*_on_stream), CUDA IPC peer mappings inside one
// host, and the cpu backend (rank threads share an address space). Between emulated
// machines, one-sided traffic goes through a transport paced to the emulated link
// (comm/emulation.h), whatever the backend.
//
// Signals are 64-bit words in the heap (num_signal_slots() per rank): put_with_signal makes
// the data visible at the peer before the peer's slot changes; wait_signal blocks the stream
// until the local slot satisfies a comparison, bounded by the wait timeout. A timeout on the
// GPU records who waited for whom, prints it and traps; check_errors() then throws it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/runtime/stream.h"

namespace tessera {

enum class SignalOp : uint8_t { kSet, kAdd };
enum class WaitCmp : uint8_t { kEq, kNe, kGe, kGt };
const char* wait_cmp_name(WaitCmp cmp);

// One symmetric allocation: the same offset and size on every rank.
struct SymmetricBuffer {
  void* local = nullptr;  // this rank's copy
  size_t offset = 0;      // offset inside the heap, equal on every rank
  size_t bytes = 0;
};

class SymmetricHeap {
 public:
  virtual ~SymmetricHeap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  // "nvshmem", "ipc", "cpu"; "+paced" when traffic to `peer` crosses an emulated machine.
  virtual std::string transport(int peer) const = 0;

  // Collective: every rank calls with the same bytes, in the same order.
  virtual SymmetricBuffer allocate(size_t bytes) = 0;
  // Gives `buffer` back. Every rank releases the same buffers in the same order, once nothing
  // reads or writes them any more (its users synchronized). The cuda heaps reclaim the space of
  // released buffers from the top down (an operation made and dropped per call reuses it); the
  // cpu heap, address space reserved and committed as touched, keeps it until it is destroyed.
  virtual void release(const SymmetricBuffer& buffer) { (void)buffer; }
  // Address of `peer`'s copy of `buffer` that kernels on this rank may load/store, or nullptr
  // when the peer is not load/store reachable.
  virtual void* peer_ptr(const SymmetricBuffer& buffer, int peer) const = 0;

  virtual void put(const SymmetricBuffer& dst, size_t dst_offset, const void* src, size_t bytes,
                   int peer, const Stream& s) = 0;
  virtual void get(void* dst, const SymmetricBuffer& src, size_t src_offset, size_t bytes, int peer,
                   const Stream& s) = 0;
  // Pitched (2-D) transfers: `rows` rows of `row_bytes` each; row r sits at
  // dst_offset + r * dst_pitch in the symmetric buffer and at src + r * src_pitch locally (put;
  // mirrored for get). One transfer, not `rows`: across emulated machines it is paced once for
  // rows * row_bytes bytes plus one latency. Pitches must be >= row_bytes when rows > 1.
  virtual void put_2d(const SymmetricBuffer& dst, size_t dst_offset, size_t dst_pitch,
                      const void* src, size_t src_pitch, size_t row_bytes, size_t rows, int peer,
                      const Stream& s) = 0;
  virtual void get_2d(void* dst, size_t dst_pitch, const SymmetricBuffer& src, size_t src_offset,
                      size_t src_pitch, size_t row_bytes, size_t rows, int peer,
                      const Stream& s) = 0;
  virtual void put_with_signal(const SymmetricBuffer& dst, size_t dst_offset, const void* src,
                               size_t bytes, int peer, int signal_slot, SignalOp op, uint64_t value,
                               const Stream& s) = 0;
  virtual void signal(int peer, int signal_slot, SignalOp op, uint64_t value, const Stream& s) = 0;
  // The stream waits until this rank's `signal_slot` <cmp> value. `from_rank` is the rank
  // expected to signal (named in the timeout message; -1 when several).
  virtual void wait_signal(int signal_slot, WaitCmp cmp, uint64_t value, int from_rank,
                           const Stream& s) = 0;
  // Reads this rank's signal slot from the host (after the stream is synchronized).
  virtual uint64_t read_signal(int signal_slot) const = 0;
  // Every rank's prior puts are visible and every rank arrived; bounded.
  virtual void barrier(const Stream& s) = 0;
  // Throws the first device-side timeout recorded by this heap's waits, if any.
  virtual void check_errors() const = 0;

  // Two-sided traffic between emulated machines (NCCL over the host's sockets) does not go
  // through the heap, but it should cross the same emulated NICs. A receiver brackets it on
  // its stream: reserve_link() when the stream reaches the transfer takes `bytes` of time on
  // the sender's egress and this rank's ingress NIC (shared with the heap's paced traffic);
  // hold_for_link(token) after the transfer holds the stream until the link would have
  // delivered it (+ latency). A transfer the sockets deliver later is not held. Both are
  // no-ops (token -1) unless `src_rank` is on another emulated machine.
  virtual int reserve_link(int src_rank, size_t bytes, const Stream& s) = 0;
  virtual void hold_for_link(int token, const Stream& s) = 0;

  int num_signal_slots() const { return num_signal_slots_; }

 protected:
  explicit SymmetricHeap(int num_signal_slots) : num_signal_slots_(num_signal_slots) {}
  void check_put_args(const SymmetricBuffer& buf, size_t offset, size_t bytes, int peer,
                      const char* op) const;
  // check_put_args for a pitched transfer: the span offset + (rows - 1) * pitch + row_bytes
  // lies in `buf`, both pitches are >= row_bytes (when rows > 1) and `local` is non-null when
  // there are bytes. The names are "dst"/"src" as the caller sees them.
  void check_put_2d_args(const SymmetricBuffer& buf, size_t offset, size_t pitch,
                         const char* pitch_name, const void* local, size_t local_pitch,
                         const char* local_name, size_t row_bytes, size_t rows, int peer,
                         const char* op) const;
  void check_signal_slot(int slot, const char* op) const;

 private:
  int num_signal_slots_;
};

}  // namespace tessera
