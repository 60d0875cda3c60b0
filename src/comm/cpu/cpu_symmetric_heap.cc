// CpuSymmetricHeap: one-sided puts, gets and signals between rank threads
// (see cpu_symmetric_heap.h).
#include "comm/cpu/cpu_symmetric_heap.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <thread>

#include "comm/cpu/cpu_fault.h"
#include "tessera/comm/emulation.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"

namespace tessera::cpu {

namespace {

void check_cpu_stream(const Stream& s, const char* op) {
  TESSERA_CHECK_ARG(s.backend() == Backend::kCpu, op, ": stream is a ", backend_name(s.backend()),
                    " stream: expected a cpu stream");
}

bool compare(uint64_t v, WaitCmp cmp, uint64_t value) {
  switch (cmp) {
    case WaitCmp::kEq:
      return v == value;
    case WaitCmp::kNe:
      return v != value;
    case WaitCmp::kGe:
      return v >= value;
    case WaitCmp::kGt:
      return v > value;
  }
  return false;
}

std::vector<int> identity_ranks(int n) {
  std::vector<int> r(n);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

}  // namespace

CpuHeapShared::CpuHeapShared(const Topology& topology, size_t heap_bytes,
                             std::shared_ptr<FailureState> failure)
    : topology_(topology),
      heap_bytes_(heap_bytes),
      world_("world", identity_ranks(topology.world_size), std::move(failure)) {
  TESSERA_CHECK_ARG(heap_bytes > 0, "heap_bytes = 0: expected > 0");
  for (int r = 0; r < topology.world_size; ++r) {
    // Reserved, not committed: pages appear as ranks touch them, so eight 1 GiB heaps are cheap.
    void* p = mmap(nullptr, heap_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      for (std::byte* a : arenas_) munmap(a, heap_bytes_);
      arenas_.clear();
      throw_error(ErrorCode::kSystem, str("symmetric heap of rank ", r, ": mmap of heap_bytes = ",
                                          heap_bytes, " failed (", std::strerror(err),
                                          "): expected a smaller ContextOptions::heap_bytes"));
    }
    arenas_.push_back(static_cast<std::byte*>(p));
    signals_.push_back(std::make_unique<std::atomic<uint64_t>[]>(kCpuSignalSlots));
  }
  raise_counts_ = std::make_unique<std::atomic<std::atomic<uint32_t>*>[]>(
      size_t(topology.world_size) * kCpuSignalSlots);
}

CpuHeapShared::~CpuHeapShared() {
  for (std::byte* a : arenas_) munmap(a, heap_bytes_);
}

CpuWorld::Clock::time_point CpuHeapShared::reserve_link(int src_rank, int dst_rank, size_t bytes,
                                                        CpuWorld::Clock::time_point now) {
  const LinkSpec& link = topology_.cross_link;
  auto us = [](double v) {
    return std::chrono::duration_cast<CpuWorld::Clock::duration>(
        std::chrono::duration<double, std::micro>(v));
  };
  const auto latency = us(paced_transfer_us(link, 0));
  if (bytes == 0) return now + latency;
  const auto busy = us(paced_transfer_us(link, bytes)) - latency;
  std::lock_guard<std::mutex> lock(link_mutex_);
  if (egress_free_.empty()) {
    egress_free_.assign(size_t(size()), now);
    ingress_free_.assign(size_t(size()), now);
  }
  const auto begin =
      std::max({now, egress_free_[size_t(src_rank)], ingress_free_[size_t(dst_rank)]});
  const auto end = begin + busy;
  egress_free_[size_t(src_rank)] = end;
  ingress_free_[size_t(dst_rank)] = end;
  return end + latency;
}

void CpuHeapShared::count_raise(int dst_rank, int slot, int src_rank) {
  std::atomic<std::atomic<uint32_t>*>& entry =
      raise_counts_[size_t(dst_rank) * kCpuSignalSlots + size_t(slot)];
  std::atomic<uint32_t>* counts = entry.load(std::memory_order_acquire);
  if (counts == nullptr) {
    std::lock_guard<std::mutex> lock(raise_mutex_);
    counts = entry.load(std::memory_order_acquire);
    if (counts == nullptr) {
      raise_storage_.push_back(std::make_unique<std::atomic<uint32_t>[]>(size_t(size())));
      counts = raise_storage_.back().get();
      entry.store(counts, std::memory_order_release);
    }
  }
  counts[src_rank].fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint32_t> CpuHeapShared::raises(int dst_rank, int slot) const {
  std::vector<uint32_t> out(size_t(size()), 0);
  const std::atomic<uint32_t>* counts =
      raise_counts_[size_t(dst_rank) * kCpuSignalSlots + size_t(slot)].load(
          std::memory_order_acquire);
  if (counts != nullptr) {
    for (int r = 0; r < size(); ++r) out[size_t(r)] = counts[r].load(std::memory_order_relaxed);
  }
  return out;
}

CpuSymmetricHeap::CpuSymmetricHeap(std::shared_ptr<CpuHeapShared> shared, int rank)
    : SymmetricHeap(kCpuSignalSlots), shared_(std::move(shared)), rank_(rank) {}

bool CpuSymmetricHeap::crosses_machine(int peer) const {
  return is_cross_machine(shared_->topology().link(rank_, peer));
}

std::string CpuSymmetricHeap::transport(int peer) const {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size(), "transport: peer = ", peer, ": expected 0..",
                    size() - 1);
  return crosses_machine(peer) ? "cpu+paced" : "cpu";
}

void CpuSymmetricHeap::check_owned(const SymmetricBuffer& buffer, const char* op) const {
  const bool inside = buffer.offset <= shared_->heap_bytes() &&
                      buffer.bytes <= shared_->heap_bytes() - buffer.offset;
  TESSERA_CHECK_ARG(inside && buffer.local == shared_->arena(rank_) + buffer.offset, op,
                    ": symmetric buffer (heap offset ", buffer.offset, ", ", buffer.bytes,
                    " bytes, local ", buffer.local, ") was not allocated from this rank's heap");
}

void CpuSymmetricHeap::pace(int src_rank, int dst_rank, size_t bytes,
                            CpuWorld::Clock::time_point start) const {
  if (!crosses_machine(src_rank == rank_ ? dst_rank : src_rank)) return;
  sleep_until(shared_->reserve_link(src_rank, dst_rank, bytes, start));
}

void CpuSymmetricHeap::sleep_until(CpuWorld::Clock::time_point until) {
  // Sleep while far from the deadline (sleeps overshoot), yield near it.
  for (auto now = CpuWorld::Clock::now(); now < until; now = CpuWorld::Clock::now()) {
    if (until - now > std::chrono::microseconds(200)) {
      std::this_thread::sleep_for(until - now - std::chrono::microseconds(100));
    } else {
      std::this_thread::yield();
    }
  }
}

SymmetricBuffer CpuSymmetricHeap::allocate(size_t bytes) {
  fault_point("heap.allocate");
  const std::string op = "heap.allocate";
  const uint64_t seq = ++num_collectives_;
  Contribution mine;
  mine.arg0 = int64_t(bytes);
  mine.arg1 = int64_t(next_offset_);
  CpuWorld& world = shared_->world();
  std::shared_ptr<CollectiveSlot> slot = world.arrive(rank_, seq, op, mine);
  struct Release {
    CpuWorld& world;
    uint64_t seq;
    CollectiveSlot& slot;
    ~Release() { world.release(seq, slot); }
  } release{world, seq, *slot};
  world.finish(rank_, seq, op, *slot, false);

  // Every rank sees every rank's request, so every rank throws the same error.
  for (int r = 1; r < size(); ++r) {
    const Contribution& c = slot->contributions[r];
    const Contribution& first = slot->contributions[0];
    TESSERA_CHECK_ARG(c.arg0 == first.arg0, op, " #", seq, ": rank 0 allocates ", first.arg0,
                      " bytes but rank ", r, " allocates ", c.arg0,
                      ": expected the same bytes on every rank, in the same order");
    TESSERA_CHECK(c.arg1 == first.arg1, ErrorCode::kInternal, op, " #", seq,
                  ": heap offsets diverged (rank 0 at ", first.arg1, ", rank ", r, " at ", c.arg1,
                  ")");
  }
  const size_t heap = shared_->heap_bytes();
  const size_t offset =
      (next_offset_ + kCpuHeapAlignment - 1) / kCpuHeapAlignment * kCpuHeapAlignment;
  TESSERA_CHECK_ARG(offset <= heap && bytes <= heap - offset, op, "(", bytes,
                    " bytes): the symmetric heap of ", heap, " bytes has ",
                    offset <= heap ? heap - offset : 0,
                    " bytes free: expected a larger ContextOptions::heap_bytes");
  next_offset_ = offset + bytes;
  return SymmetricBuffer{shared_->arena(rank_) + offset, offset, bytes};
}

void* CpuSymmetricHeap::peer_ptr(const SymmetricBuffer& buffer, int peer) const {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size(), "peer_ptr: peer = ", peer, ": expected 0..",
                    size() - 1);
  check_owned(buffer, "peer_ptr");
  if (crosses_machine(peer)) return nullptr;
  return shared_->arena(peer) + buffer.offset;
}

void CpuSymmetricHeap::put(const SymmetricBuffer& dst, size_t dst_offset, const void* src,
                           size_t bytes, int peer, const Stream& s) {
  fault_point("put");
  const auto start = CpuWorld::Clock::now();
  check_cpu_stream(s, "put");
  check_put_args(dst, dst_offset, bytes, peer, "put");
  check_owned(dst, "put");
  TESSERA_CHECK_ARG(bytes == 0 || src != nullptr, "put of ", bytes, " bytes: src is null");
  if (bytes > 0) std::memcpy(shared_->arena(peer) + dst.offset + dst_offset, src, bytes);
  pace(rank_, peer, bytes, start);
}

void CpuSymmetricHeap::get(void* dst, const SymmetricBuffer& src, size_t src_offset, size_t bytes,
                           int peer, const Stream& s) {
  fault_point("get");
  const auto start = CpuWorld::Clock::now();
  check_cpu_stream(s, "get");
  check_put_args(src, src_offset, bytes, peer, "get");
  check_owned(src, "get");
  TESSERA_CHECK_ARG(bytes == 0 || dst != nullptr, "get of ", bytes, " bytes: dst is null");
  if (bytes > 0) std::memcpy(dst, shared_->arena(peer) + src.offset + src_offset, bytes);
  pace(peer, rank_, bytes, start);
}

void CpuSymmetricHeap::put_2d(const SymmetricBuffer& dst, size_t dst_offset, size_t dst_pitch,
                              const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                              int peer, const Stream& s) {
  fault_point("put_2d");
  const auto start = CpuWorld::Clock::now();
  check_cpu_stream(s, "put_2d");
  check_put_2d_args(dst, dst_offset, dst_pitch, "dst_pitch", src, src_pitch, "src", row_bytes, rows,
                    peer, "put_2d");
  check_owned(dst, "put_2d");
  if (rows > 0 && row_bytes > 0) {
    std::byte* to = shared_->arena(peer) + dst.offset + dst_offset;
    const auto* from = static_cast<const std::byte*>(src);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(to + r * dst_pitch, from + r * src_pitch, row_bytes);
    }
  }
  pace(rank_, peer, rows * row_bytes, start);
}

void CpuSymmetricHeap::get_2d(void* dst, size_t dst_pitch, const SymmetricBuffer& src,
                              size_t src_offset, size_t src_pitch, size_t row_bytes, size_t rows,
                              int peer, const Stream& s) {
  fault_point("get_2d");
  const auto start = CpuWorld::Clock::now();
  check_cpu_stream(s, "get_2d");
  check_put_2d_args(src, src_offset, src_pitch, "src_pitch", dst, dst_pitch, "dst", row_bytes, rows,
                    peer, "get_2d");
  check_owned(src, "get_2d");
  if (rows > 0 && row_bytes > 0) {
    const std::byte* from = shared_->arena(peer) + src.offset + src_offset;
    auto* to = static_cast<std::byte*>(dst);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(to + r * dst_pitch, from + r * src_pitch, row_bytes);
    }
  }
  pace(peer, rank_, rows * row_bytes, start);
}

int CpuSymmetricHeap::reserve_link(int src_rank, size_t bytes, const Stream& s) {
  check_cpu_stream(s, "reserve_link");
  TESSERA_CHECK_ARG(src_rank >= 0 && src_rank < size(), "reserve_link(src_rank = ", src_rank,
                    "): expected 0..", size() - 1);
  if (src_rank == rank_ || !crosses_machine(src_rank)) return -1;
  const int token = next_link_token_;
  next_link_token_ = (next_link_token_ + 1) % kLinkReleaseTokens;
  link_release_[size_t(token)] =
      shared_->reserve_link(src_rank, rank_, bytes, CpuWorld::Clock::now());
  return token;
}

void CpuSymmetricHeap::hold_for_link(int token, const Stream& s) {
  check_cpu_stream(s, "hold_for_link");
  TESSERA_CHECK_ARG(token >= -1 && token < kLinkReleaseTokens, "hold_for_link(token = ", token,
                    "): expected a token from reserve_link");
  if (token >= 0) sleep_until(link_release_[size_t(token)]);
}

void CpuSymmetricHeap::update_signal(int peer, int signal_slot, SignalOp op, uint64_t value) {
  std::atomic<uint64_t>& word = shared_->signal_word(peer, signal_slot);
  // Before the raise itself: a waiter that sees the raise and then times out on a later one
  // must not find this one uncounted. (A rank's own updates of its slot are resets.)
  if (peer != rank_) shared_->count_raise(peer, signal_slot, rank_);
  // Release: whatever this rank wrote before (the put's data) is visible to an acquire reader.
  if (op == SignalOp::kSet) {
    word.store(value, std::memory_order_release);
  } else {
    word.fetch_add(value, std::memory_order_acq_rel);
  }
}

void CpuSymmetricHeap::put_with_signal(const SymmetricBuffer& dst, size_t dst_offset,
                                       const void* src, size_t bytes, int peer, int signal_slot,
                                       SignalOp op, uint64_t value, const Stream& s) {
  check_signal_slot(signal_slot, "put_with_signal");
  put(dst, dst_offset, src, bytes, peer, s);  // paced: the signal lands after the data
  update_signal(peer, signal_slot, op, value);
}

void CpuSymmetricHeap::signal(int peer, int signal_slot, SignalOp op, uint64_t value,
                              const Stream& s) {
  fault_point("signal");
  const auto start = CpuWorld::Clock::now();
  check_cpu_stream(s, "signal");
  TESSERA_CHECK_ARG(peer >= 0 && peer < size(), "signal: peer = ", peer, ": expected 0..",
                    size() - 1);
  check_signal_slot(signal_slot, "signal");
  pace(rank_, peer, 0, start);  // the latency only, as on the cuda heaps
  update_signal(peer, signal_slot, op, value);
}

void CpuSymmetricHeap::wait_signal(int signal_slot, WaitCmp cmp, uint64_t value, int from_rank,
                                   const Stream& s) {
  fault_point("wait_signal");
  check_cpu_stream(s, "wait_signal");
  check_signal_slot(signal_slot, "wait_signal");
  TESSERA_CHECK_ARG(from_rank >= -1 && from_rank < size(), "wait_signal: from_rank = ", from_rank,
                    ": expected -1 (several) or 0..", size() - 1);
  const std::atomic<uint64_t>& word = shared_->signal_word(rank_, signal_slot);
  if (compare(word.load(std::memory_order_acquire), cmp, value)) return;

  const auto start = CpuWorld::Clock::now();
  const auto deadline = start + std::chrono::milliseconds(wait_timeout_ms());
  const std::string whom = from_rank >= 0 ? str("rank ", from_rank) : std::string("any rank");
  std::vector<int> awaited;
  for (int r = 0; r < size(); ++r) {
    if (r == from_rank || (from_rank < 0 && r != rank_)) awaited.push_back(r);
  }
  auto sleep = std::chrono::microseconds(1);
  for (int round = 0;; ++round) {
    uint64_t v = word.load(std::memory_order_acquire);
    if (compare(v, cmp, value)) return;
    if (round < 64) continue;  // short spin: a peer usually answers within microseconds
    std::string message;
    int failed = shared_->world().failure()->first_failed(awaited, &message);
    if (failed >= 0) {
      throw_error(ErrorCode::kPeerFailure,
                  str("rank ", rank_, " stopped waiting in wait_signal(slot ", signal_slot, " ",
                      wait_cmp_name(cmp), " ", value, ") for ", whom, ": rank ", failed,
                      " failed: ", message));
    }
    if (CpuWorld::Clock::now() >= deadline) {
      throw_error(
          ErrorCode::kTimeout,
          str("rank ", rank_, " waited ", elapsed_ms(start), " ms in wait_signal(slot ",
              signal_slot, " ", wait_cmp_name(cmp), " ", value, ") for ", whom, ": the slot holds ",
              v, from_rank >= 0 ? std::string() : behind(signal_slot, awaited)));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(200));
  }
}

std::string CpuSymmetricHeap::behind(int signal_slot, const std::vector<int>& awaited) const {
  if (awaited.empty()) return "";
  const std::vector<uint32_t> raises = shared_->raises(rank_, signal_slot);
  uint32_t fewest = std::numeric_limits<uint32_t>::max();
  for (int r : awaited) fewest = std::min(fewest, raises[size_t(r)]);
  std::vector<int> lagging;
  std::string counts;
  for (int r : awaited) {
    if (raises[size_t(r)] == fewest) lagging.push_back(r);
    counts += str(counts.empty() ? "" : ", ", "rank ", r, ": ", raises[size_t(r)]);
  }
  std::string names;
  for (int r : lagging) names += str(names.empty() ? "" : ", ", r);
  return str("; raises of the slot so far (", counts, "): waiting for rank",
             lagging.size() > 1 ? "s " : " ", names);
}

uint64_t CpuSymmetricHeap::read_signal(int signal_slot) const {
  check_signal_slot(signal_slot, "read_signal");
  return shared_->signal_word(rank_, signal_slot).load(std::memory_order_acquire);
}

void CpuSymmetricHeap::barrier(const Stream& s) {
  fault_point("heap.barrier");
  check_cpu_stream(s, "heap.barrier");
  const std::string op = "heap.barrier";
  const uint64_t seq = ++num_collectives_;
  CpuWorld& world = shared_->world();
  // The rendezvous' mutex orders every rank's prior puts before every rank's return.
  std::shared_ptr<CollectiveSlot> slot = world.arrive(rank_, seq, op, Contribution{});
  world.finish(rank_, seq, op, *slot, false);
  world.release(seq, *slot);
}

}  // namespace tessera::cpu
