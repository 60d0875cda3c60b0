// CudaSymmetricHeap: allocation, checks, paced routing, bounded waits and the barrier shared by
// the NVSHMEM and IPC heaps (see cuda_heap.h).
#include "comm/cuda/cuda_heap.h"

#include <algorithm>
#include <cstring>

#include "comm/cuda/clock_probe.h"
#include "comm/cuda/paced_copy.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::cuda_comm {

namespace {
constexpr size_t kPageBytes = 4096;
size_t round_up(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}
size_t signal_region_bytes(int world_size) {
  // User slots, barrier words, NIC clocks, probe requests, probe replies.
  const size_t words = size_t(CudaSymmetricHeap::kNumUserSignalSlots) + 2 * size_t(world_size) + 4;
  return round_up(words * 8, kPageBytes);
}
}  // namespace

void agree_on_success(Bootstrap& bootstrap, const std::string& local_error, ErrorCode code,
                      const std::string& stage) {
  const std::vector<std::string> errors = bootstrap.allgather_strings(local_error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    throw_error(code, r == size_t(bootstrap.rank())
                          ? str(stage, " failed on this rank: ", errors[r])
                          : str(stage, " failed on rank ", r, ": ", errors[r]));
  }
}

CudaSymmetricHeap::CudaSymmetricHeap(Bootstrap& bootstrap, const Topology& topology, int device,
                                     size_t heap_bytes)
    : SymmetricHeap(kNumUserSignalSlots),
      bootstrap_(bootstrap),
      topology_(topology),
      rank_(bootstrap.rank()),
      size_(bootstrap.size()),
      device_(device),
      heap_bytes_(round_up(heap_bytes, kPageBytes)),
      arena_bytes_(arena_bytes_for(heap_bytes, bootstrap.size())),
      user_begin_(signal_region_bytes(bootstrap.size())),
      next_offset_(user_begin_) {
  TESSERA_CHECK_ARG(heap_bytes > 0, "heap_bytes = 0: expected the size of the symmetric heap");
  TESSERA_CHECK_ARG(topology.world_size == size_, "topology has ", topology.world_size,
                    " ranks but the bootstrap has ", size_, "; expected the same ranks");
  TESSERA_CHECK_ARG(int(topology.links.size()) == size_ * size_, "topology.links has ",
                    topology.links.size(), " entries; expected world_size^2 = ", size_ * size_);
  timeout_log_ = std::make_unique<WaitTimeoutLog>();
}

CudaSymmetricHeap::~CudaSymmetricHeap() {
  if (link_release_ != nullptr) cudaFree(link_release_);
}

size_t CudaSymmetricHeap::arena_bytes_for(size_t heap_bytes, int world_size) {
  return signal_region_bytes(world_size) + round_up(heap_bytes, kPageBytes);
}

void CudaSymmetricHeap::attach_arena(void* local_base, std::vector<void*> peer_bases) {
  TESSERA_CHECK(local_base != nullptr && int(peer_bases.size()) == size_, ErrorCode::kInternal,
                "attach_arena: local base ", local_base, " and ", peer_bases.size(),
                " peer bases for ", size_, " ranks");
  local_base_ = static_cast<unsigned char*>(local_base);
  peer_bases_.resize(size_);
  for (int r = 0; r < size_; ++r) peer_bases_[r] = static_cast<unsigned char*>(peer_bases[r]);
  peer_bases_[rank_] = local_base_;
  signals_ = reinterpret_cast<uint64_t*>(local_base_);
  TESSERA_HEAP_CUDA_CHECK(cudaMemset(local_base_, 0, user_begin_));
  TESSERA_HEAP_CUDA_CHECK(cudaDeviceSynchronize());
  // No rank may signal another before that rank zeroed its signal words.
  bootstrap_.barrier();
  calibrate_clock();
}

bool CudaSymmetricHeap::has_emulated_machines() const {
  return topology_.emulated && topology_.num_machines() > 1;
}

void CudaSymmetricHeap::calibrate_clock() {
  if (!has_emulated_machines() || size_ == 1) return;
  // Every rank answers (the same order everywhere), so a missing mapping fails on all ranks.
  std::string error;
  for (int r = 1; r < size_ && error.empty(); ++r) {
    if (peer_bases_[0] == nullptr || (rank_ == 0 && peer_bases_[r] == nullptr))
      error = str("rank ", rank_, " cannot load/store rank ", rank_ == 0 ? r : 0,
                  "'s heap, which the shared emulated links need");
  }
  agree_on_success(bootstrap_, error, ErrorCode::kUnsupported, "emulated link clock calibration");
  const uint64_t first_round = clock_probe_rounds_;
  clock_probe_rounds_ += kClockProbeRounds;
  const uint64_t timeout_ns = uint64_t(std::max<int64_t>(1, wait_timeout_ms())) * 1000000ull;
  ClockProbeResult* device_result = nullptr;
  TESSERA_HEAP_CUDA_CHECK(cudaSetDevice(device_));
  TESSERA_HEAP_CUDA_CHECK(cudaMalloc(&device_result, sizeof(ClockProbeResult)));
  TESSERA_HEAP_CUDA_CHECK(cudaMemset(device_result, 0, sizeof(ClockProbeResult)));
  if (rank_ == 0) {
    TESSERA_CHECK(size_ - 1 <= kMaxClockProbeClients, ErrorCode::kUnsupported,
                  "emulated machines: ", size_, " ranks; the clock probe serves at most ",
                  kMaxClockProbeClients + 1);
    ClockProbeServerArgs args;
    for (int r = 1; r < size_; ++r) {
      args.requests[r - 1] = local_signal_word(probe_request_word(r));
      args.reply_words[r - 1] =
          reinterpret_cast<uint64_t*>(peer_bases_[r] + signal_word_offset(probe_reply_word()));
      args.client_ranks[r - 1] = r;
    }
    args.num_clients = size_ - 1;
    args.first_round = first_round;
    args.timeout_ns = timeout_ns;
    launch_clock_probe_server(args, device_result, nullptr);
  } else {
    ClockProbeClientArgs args;
    args.request =
        reinterpret_cast<uint64_t*>(peer_bases_[0] + signal_word_offset(probe_request_word(rank_)));
    args.reply_words = local_signal_word(probe_reply_word());
    args.first_round = first_round;
    args.timeout_ns = timeout_ns;
    launch_clock_probe_client(args, device_result, nullptr);
  }
  ClockProbeResult result;
  const cudaError_t sync = cudaDeviceSynchronize();
  if (sync == cudaSuccess) {
    TESSERA_HEAP_CUDA_CHECK(
        cudaMemcpy(&result, device_result, sizeof(result), cudaMemcpyDeviceToHost));
  }
  cudaFree(device_result);
  if (sync != cudaSuccess) fail_cuda(sync, "clock probe");
  error.clear();
  if (result.timed_out) {
    error = str("rank ", rank_, " waited ", wait_timeout_ms(), " ms for rank ", result.waited_for,
                " to answer clock probe ", result.round, " (emulated link calibration)");
  }
  agree_on_success(bootstrap_, error, ErrorCode::kTimeout, "emulated link clock calibration");
  clock_offset_ns_ = rank_ == 0 ? 0 : result.offset_ns;
  clock_round_trip_ns_ = rank_ == 0 ? 0 : result.round_trip_ns;
  TESSERA_LOG(kDebug, "rank ", rank_, ": %globaltimer offset to rank 0 ", clock_offset_ns_,
              " ns (best round trip ", clock_round_trip_ns_, " ns)");
}

int CudaSymmetricHeap::reserve_link(int src_rank, size_t bytes, const Stream& s) {
  TESSERA_CHECK_ARG(src_rank >= 0 && src_rank < size_, "reserve_link(src_rank = ", src_rank,
                    "): expected 0 <= src_rank < ", size_);
  cudaStream_t stream = stream_of(s, "reserve_link");
  if (!is_paced(src_rank)) return -1;
  if (link_release_ == nullptr) {
    TESSERA_HEAP_CUDA_CHECK(
        cudaMalloc(&link_release_, sizeof(unsigned long long) * kLinkReleaseWords));
  }
  const int token = next_link_token_;
  next_link_token_ = (next_link_token_ + 1) % kLinkReleaseWords;
  launch_link_reservation(link_clocks(src_rank, rank_, "reserve_link"), bytes, topology_.cross_link,
                          link_release_ + token, stream);
  return token;
}

void CudaSymmetricHeap::hold_for_link(int token, const Stream& s) {
  TESSERA_CHECK_ARG(token >= -1 && token < kLinkReleaseWords, "hold_for_link(token = ", token,
                    "): expected a token from reserve_link");
  cudaStream_t stream = stream_of(s, "hold_for_link");
  if (token < 0) return;
  launch_hold_until_release(link_release_ + token, stream);
}

LinkClocks CudaSymmetricHeap::link_clocks(int src_rank, int dst_rank, const char* op) const {
  auto word = [&](int of_rank, bool ingress) {
    unsigned char* base = of_rank == rank_ ? local_base_ : require_peer_base(of_rank, op);
    return reinterpret_cast<unsigned long long*>(base +
                                                 signal_word_offset(nic_clock_word(ingress)));
  };
  LinkClocks clocks;
  clocks.egress = word(src_rank, false);
  clocks.ingress = word(dst_rank, true);
  clocks.time_offset_ns = clock_offset_ns_;
  return clocks;
}

void CudaSymmetricHeap::fail_cuda(cudaError_t error, const char* what) const {
  timeout_log_->throw_if_timed_out();
  throw_error(ErrorCode::kCuda, str("rank ", rank_, ": ", what, " failed in the ", transport_name(),
                                    " symmetric heap: ", cudaGetErrorString(error)));
}

cudaStream_t CudaSymmetricHeap::stream_of(const Stream& s, const char* op) const {
  TESSERA_CHECK_ARG(s.backend() == Backend::kCuda, op, ": stream is a ", backend_name(s.backend()),
                    " stream; the ", transport_name(),
                    " heap needs a cuda stream on cuda:", device_);
  TESSERA_CHECK_ARG(s.device().index == device_, op, ": stream is on ", s.device().to_string(),
                    "; expected cuda:", device_, " (this rank's GPU)");
  return static_cast<cudaStream_t>(s.cuda_stream());
}

bool CudaSymmetricHeap::is_paced(int peer) const {
  return peer != rank_ && topology_.link(rank_, peer) == LinkClass::kEmulatedNetwork;
}

uint64_t* CudaSymmetricHeap::signal_word_address(int peer, int slot) const {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size_, "signal_word_address(peer = ", peer,
                    "): expected 0 <= peer < ", size_);
  check_signal_slot(slot, "signal_word_address");
  if (peer == rank_) return local_signal_word(slot);
  if (is_paced(peer) || peer_bases_[size_t(peer)] == nullptr) return nullptr;
  return reinterpret_cast<uint64_t*>(peer_bases_[size_t(peer)] + signal_word_offset(slot));
}

std::string CudaSymmetricHeap::transport(int peer) const {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size_, "transport(peer = ", peer,
                    "): expected 0 <= peer < ", size_);
  std::string name = transport_name();
  if (is_paced(peer)) name += "+paced";
  return name;
}

uint64_t CudaSymmetricHeap::latency_ns() const {
  return uint64_t(std::max(0.0, topology_.cross_link.latency_us) * 1000.0 + 0.5);
}

SymmetricBuffer CudaSymmetricHeap::allocate(size_t bytes) {
  // Collective: every rank must ask for the same bytes in the same order, or the offsets (and
  // every peer address computed from them) would disagree. Checked here, once per allocation.
  struct Request {
    uint64_t bytes;
    uint64_t index;
  };
  const Request mine{bytes, uint64_t(num_allocations_)};
  std::vector<Request> all(size_);
  bootstrap_.allgather(&mine, all.data(), sizeof(Request));
  for (int r = 0; r < size_; ++r) {
    TESSERA_CHECK_ARG(all[r].bytes == mine.bytes && all[r].index == mine.index,
                      "allocate is collective: allocation #", mine.index, " asks for ", mine.bytes,
                      " bytes on rank ", rank_, " but rank ", r, " asks for ", all[r].bytes,
                      " bytes as allocation #", all[r].index,
                      "; expected the same sizes in the same order on every rank");
  }
  const size_t offset = round_up(next_offset_, kAllocationAlignment);
  TESSERA_CHECK_ARG(offset + bytes <= arena_bytes_, "allocate(bytes = ", bytes, "): the ",
                    transport_name(), " symmetric heap has ", heap_bytes_, " bytes of which ",
                    arena_bytes_ - std::min(arena_bytes_, offset),
                    " are left; expected a larger ContextOptions::heap_bytes");
  next_offset_ = offset + bytes;
  ++num_allocations_;
  live_.push_back({offset, offset + bytes, false});
  SymmetricBuffer buffer;
  buffer.local = local_base_ + offset;
  buffer.offset = offset;
  buffer.bytes = bytes;
  return buffer;
}

void CudaSymmetricHeap::release(const SymmetricBuffer& buffer) {
  if (buffer.local == nullptr) return;
  const auto it = std::find_if(live_.begin(), live_.end(), [&](const Allocation& a) {
    return a.offset == buffer.offset && !a.released;
  });
  TESSERA_CHECK_ARG(it != live_.end(), "release(buffer at offset ", buffer.offset,
                    "): not a live allocation of this heap");
  it->released = true;
  while (!live_.empty() && live_.back().released) live_.pop_back();
  next_offset_ = live_.empty() ? user_begin_ : live_.back().end;
}

void CudaSymmetricHeap::check_buffer(const SymmetricBuffer& buffer, const char* op,
                                     const char* what) const {
  TESSERA_CHECK_ARG(buffer.offset >= user_begin_ && buffer.offset + buffer.bytes <= arena_bytes_ &&
                        buffer.local == local_base_ + buffer.offset,
                    op, ": ", what, " (offset ", buffer.offset, ", ", buffer.bytes,
                    " bytes, local ", buffer.local,
                    ") was not allocated by this heap; expected a buffer from allocate()");
}

unsigned char* CudaSymmetricHeap::require_peer_base(int peer, const char* op) const {
  unsigned char* base = peer_bases_[peer];
  TESSERA_CHECK(base != nullptr, ErrorCode::kUnsupported, op, ": rank ", peer,
                "'s heap is not load/store reachable from rank ", rank_, " (link ",
                link_class_name(topology_.link(rank_, peer)),
                "), which the paced transport of emulated machines needs");
  return base;
}

void* CudaSymmetricHeap::peer_ptr(const SymmetricBuffer& buffer, int peer) const {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size_, "peer_ptr(peer = ", peer, "): expected 0 <= peer < ",
                    size_);
  check_buffer(buffer, "peer_ptr", "buffer");
  // Machines cannot load or store each other's memory; a direct pointer across emulated
  // machines would also bypass the paced link (the cpu backend answers the same).
  if (is_paced(peer)) return nullptr;
  unsigned char* base = peer_bases_[peer];
  return base ? base + buffer.offset : nullptr;
}

void CudaSymmetricHeap::kernel_signal(int peer, int signal_word, SignalOp op, uint64_t value,
                                      uint64_t delay_ns, cudaStream_t stream) const {
  SignalTarget target;
  target.word = reinterpret_cast<uint64_t*>(require_peer_base(peer, "signal") +
                                            signal_word_offset(signal_word));
  target.delay_ns = delay_ns;
  launch_signal_write(&target, 1, op, value, stream);
}

void CudaSymmetricHeap::put(const SymmetricBuffer& dst, size_t dst_offset, const void* src,
                            size_t bytes, int peer, const Stream& s) {
  check_put_args(dst, dst_offset, bytes, peer, "put");
  check_buffer(dst, "put", "dst");
  TESSERA_CHECK_ARG(bytes == 0 || src != nullptr, "put: src is null for ", bytes,
                    " bytes; expected device memory");
  cudaStream_t stream = stream_of(s, "put");
  if (bytes == 0) return;
  const size_t offset = dst.offset + dst_offset;
  if (is_paced(peer)) {
    launch_paced_copy(require_peer_base(peer, "put") + offset, src, bytes, topology_.cross_link,
                      stream, link_clocks(rank_, peer, "put"));
  } else {
    direct_put(offset, src, bytes, peer, stream);
  }
}

void CudaSymmetricHeap::get(void* dst, const SymmetricBuffer& src, size_t src_offset, size_t bytes,
                            int peer, const Stream& s) {
  check_put_args(src, src_offset, bytes, peer, "get");
  check_buffer(src, "get", "src");
  TESSERA_CHECK_ARG(bytes == 0 || dst != nullptr, "get: dst is null for ", bytes,
                    " bytes; expected device memory");
  cudaStream_t stream = stream_of(s, "get");
  if (bytes == 0) return;
  const size_t offset = src.offset + src_offset;
  if (is_paced(peer)) {
    launch_paced_copy(dst, require_peer_base(peer, "get") + offset, bytes, topology_.cross_link,
                      stream, link_clocks(peer, rank_, "get"));
  } else {
    direct_get(dst, offset, bytes, peer, stream);
  }
}

void CudaSymmetricHeap::put_2d(const SymmetricBuffer& dst, size_t dst_offset, size_t dst_pitch,
                               const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                               int peer, const Stream& s) {
  check_put_2d_args(dst, dst_offset, dst_pitch, "dst_pitch", src, src_pitch, "src", row_bytes, rows,
                    peer, "put_2d");
  check_buffer(dst, "put_2d", "dst");
  cudaStream_t stream = stream_of(s, "put_2d");
  if (rows == 0 || row_bytes == 0) return;
  if (rows == 1) dst_pitch = src_pitch = row_bytes;  // unused; keeps cudaMemcpy2D's checks happy
  const size_t offset = dst.offset + dst_offset;
  if (is_paced(peer)) {
    launch_paced_copy_2d(require_peer_base(peer, "put_2d") + offset, dst_pitch, src, src_pitch,
                         row_bytes, rows, topology_.cross_link, stream,
                         link_clocks(rank_, peer, "put_2d"));
  } else {
    direct_put_2d(offset, dst_pitch, src, src_pitch, row_bytes, rows, peer, stream);
  }
}

void CudaSymmetricHeap::get_2d(void* dst, size_t dst_pitch, const SymmetricBuffer& src,
                               size_t src_offset, size_t src_pitch, size_t row_bytes, size_t rows,
                               int peer, const Stream& s) {
  check_put_2d_args(src, src_offset, src_pitch, "src_pitch", dst, dst_pitch, "dst", row_bytes, rows,
                    peer, "get_2d");
  check_buffer(src, "get_2d", "src");
  cudaStream_t stream = stream_of(s, "get_2d");
  if (rows == 0 || row_bytes == 0) return;
  if (rows == 1) dst_pitch = src_pitch = row_bytes;
  const size_t offset = src.offset + src_offset;
  if (is_paced(peer)) {
    launch_paced_copy_2d(dst, dst_pitch, require_peer_base(peer, "get_2d") + offset, src_pitch,
                         row_bytes, rows, topology_.cross_link, stream,
                         link_clocks(peer, rank_, "get_2d"));
  } else {
    direct_get_2d(dst, dst_pitch, offset, src_pitch, row_bytes, rows, peer, stream);
  }
}

void CudaSymmetricHeap::direct_put_2d(size_t dst_offset, size_t dst_pitch, const void* src,
                                      size_t src_pitch, size_t row_bytes, size_t rows, int peer,
                                      cudaStream_t stream) {
  if (unsigned char* base = peer_bases_[peer]) {
    TESSERA_HEAP_CUDA_CHECK(cudaMemcpy2DAsync(base + dst_offset, dst_pitch, src, src_pitch,
                                              row_bytes, rows, cudaMemcpyDefault, stream));
    return;
  }
  // No load/store mapping (a real remote host): the transport moves one row per call.
  const auto* from = static_cast<const unsigned char*>(src);
  for (size_t r = 0; r < rows; ++r) {
    direct_put(dst_offset + r * dst_pitch, from + r * src_pitch, row_bytes, peer, stream);
  }
}

void CudaSymmetricHeap::direct_get_2d(void* dst, size_t dst_pitch, size_t src_offset,
                                      size_t src_pitch, size_t row_bytes, size_t rows, int peer,
                                      cudaStream_t stream) {
  if (const unsigned char* base = peer_bases_[peer]) {
    TESSERA_HEAP_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, base + src_offset, src_pitch,
                                              row_bytes, rows, cudaMemcpyDefault, stream));
    return;
  }
  auto* into = static_cast<unsigned char*>(dst);
  for (size_t r = 0; r < rows; ++r) {
    direct_get(into + r * dst_pitch, src_offset + r * src_pitch, row_bytes, peer, stream);
  }
}

void CudaSymmetricHeap::put_with_signal(const SymmetricBuffer& dst, size_t dst_offset,
                                        const void* src, size_t bytes, int peer, int signal_slot,
                                        SignalOp op, uint64_t value, const Stream& s) {
  check_put_args(dst, dst_offset, bytes, peer, "put_with_signal");
  check_buffer(dst, "put_with_signal", "dst");
  check_signal_slot(signal_slot, "put_with_signal");
  TESSERA_CHECK_ARG(bytes == 0 || src != nullptr, "put_with_signal: src is null for ", bytes,
                    " bytes; expected device memory");
  cudaStream_t stream = stream_of(s, "put_with_signal");
  const size_t offset = dst.offset + dst_offset;
  if (is_paced(peer)) {
    unsigned char* base = require_peer_base(peer, "put_with_signal");
    launch_paced_copy(base + offset, src, bytes, topology_.cross_link, stream,
                      link_clocks(rank_, peer, "put_with_signal"));
    // The copy already spent the latency; an empty put still pays it once.
    kernel_signal(peer, signal_slot, op, value, bytes == 0 ? latency_ns() : 0, stream);
  } else {
    direct_put_with_signal(offset, src, bytes, peer, signal_slot, op, value, stream);
  }
}

void CudaSymmetricHeap::signal(int peer, int signal_slot, SignalOp op, uint64_t value,
                               const Stream& s) {
  TESSERA_CHECK_ARG(peer >= 0 && peer < size_, "signal(peer = ", peer, "): expected 0 <= peer < ",
                    size_);
  check_signal_slot(signal_slot, "signal");
  cudaStream_t stream = stream_of(s, "signal");
  if (is_paced(peer)) {
    kernel_signal(peer, signal_slot, op, value, latency_ns(), stream);
  } else {
    flush_puts(stream);
    direct_signal(peer, signal_slot, op, value, stream);
  }
}

void CudaSymmetricHeap::wait_signal(int signal_slot, WaitCmp cmp, uint64_t value, int from_rank,
                                    const Stream& s) {
  check_signal_slot(signal_slot, "wait_signal");
  TESSERA_CHECK_ARG(from_rank >= -1 && from_rank < size_, "wait_signal(from_rank = ", from_rank,
                    "): expected -1 (several) or 0 <= from_rank < ", size_);
  TESSERA_CHECK_ARG(int(cmp) <= int(WaitCmp::kGt), "wait_signal(cmp = ", int(cmp),
                    "): expected kEq, kNe, kGe or kGt");
  cudaStream_t stream = stream_of(s, "wait_signal");
  SignalWaitArgs args;
  args.slots = local_signal_word(signal_slot);
  args.num_slots = 1;
  args.cmp = cmp;
  args.value = value;
  args.rank = rank_;
  args.first_slot = signal_slot;
  args.from_rank = from_rank;
  args.timeout_ns = uint64_t(std::max<int64_t>(1, wait_timeout_ms())) * 1000000ull;
  launch_signal_wait(args, *timeout_log_, stream);
}

uint64_t CudaSymmetricHeap::read_signal(int signal_slot) const {
  check_signal_slot(signal_slot, "read_signal");
  uint64_t value = 0;
  TESSERA_HEAP_CUDA_CHECK(
      cudaMemcpy(&value, local_signal_word(signal_slot), sizeof(value), cudaMemcpyDefault));
  return value;
}

void CudaSymmetricHeap::barrier(const Stream& s) {
  cudaStream_t stream = stream_of(s, "barrier");
  const int64_t epoch = ++barrier_epoch_;
  if (size_ == 1) return;
  // Every rank stores the epoch it reached into its own word at every peer (kSet: the words
  // only grow), then waits until every peer's word here reached the epoch. One word per rank
  // rather than one counter lets a timeout name the rank that did not arrive.
  std::vector<SignalTarget> paced_targets;
  flush_puts(stream);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (is_paced(peer)) {
      SignalTarget t;
      t.word = reinterpret_cast<uint64_t*>(require_peer_base(peer, "barrier") +
                                           signal_word_offset(barrier_word(rank_)));
      t.delay_ns = latency_ns();
      paced_targets.push_back(t);
    } else {
      direct_signal(peer, barrier_word(rank_), SignalOp::kSet, uint64_t(epoch), stream);
    }
  }
  if (!paced_targets.empty()) {
    launch_signal_write(paced_targets.data(), int(paced_targets.size()), SignalOp::kSet,
                        uint64_t(epoch), stream);
  }
  SignalWaitArgs args;
  args.slots = local_signal_word(barrier_word(0));
  args.num_slots = size_;
  args.skip_index = rank_;
  args.cmp = WaitCmp::kGe;
  args.value = uint64_t(epoch);
  args.rank = rank_;
  args.first_slot = barrier_word(0);
  args.from_rank = -1;
  args.barrier_epoch = epoch;
  args.timeout_ns = uint64_t(std::max<int64_t>(1, wait_timeout_ms())) * 1000000ull;
  launch_signal_wait(args, *timeout_log_, stream);
}

void CudaSymmetricHeap::check_errors() const {
  timeout_log_->throw_if_timed_out();
}

}  // namespace tessera::cuda_comm
