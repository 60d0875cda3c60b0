// NcclCommunicator: non-blocking NCCL communicators with bounded waits (see the header).
#include "comm/cuda/nccl_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/cuda/host_call_watchdog.h"
#include "comm/cuda/nccl_check.h"
#include "comm/cuda/signal_kernels.h"
#include "tessera/comm/emulation.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::cuda_comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBarrierScratchBytes = 16;  // one float, padded

// Backs off from spinning to 100 us sleeps. On a non-blocking communicator NCCL (2.19 and
// later) returns ncclInProgress from every collective and finishes the enqueue within tens of
// microseconds, so the first 200 us of a wait only yield: a sleep, however short, costs the
// timer slack (~50 us on Linux), which every small collective would pay while the GPU idles.
// Long waits (a slow peer) sleep. With this budget a non-blocking 1 MiB all_gather still took
// 66 us on 2 H100s against 14 us blocking (NCCL's launch thread): why blocking is the default.
class Backoff {
 public:
  void pause() {
    if (Clock::now() - start_ < std::chrono::microseconds(200)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    if (sleep_ < std::chrono::microseconds(100)) sleep_ *= 2;
  }

 private:
  Clock::time_point start_ = Clock::now();
  std::chrono::microseconds sleep_{10};
};

// Communicators are blocking unless asked otherwise (host_call_watchdog.h says why).
const Param<bool> kNcclNonblocking(
    "TESSERA_NCCL_NONBLOCKING", false,
    "1: non-blocking NCCL communicators: every host wait inside NCCL is polled and throws "
    "kTimeout, at the cost of a launch thread per collective (60 to 160 us a call on 2 H100s); "
    "0: blocking ones, bounded by a watchdog that ends the process");

Clock::time_point deadline_after_timeout() {
  return Clock::now() + std::chrono::milliseconds(std::max<int64_t>(1, wait_timeout_ms()));
}

// A watchdog for a blocking communicator; none for a non-blocking one (its waits are polled).
std::unique_ptr<HostCallWatchdog> make_watchdog(const ncclConfig_t& config, std::string who) {
  if (config.blocking == 0) return nullptr;
  return std::make_unique<HostCallWatchdog>(std::move(who));
}

}  // namespace

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kU8:
      return ncclUint8;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU64:
      return ncclUint64;
    case DType::kFP8E4M3:
      break;  // ncclFloat8e4m3 depends on the NCCL build; fp8 travels as u8 views instead
  }
  throw_error(ErrorCode::kUnsupported, str("dtype ", int(dtype), " has no NCCL equivalent"));
}

ncclRedOp_t nccl_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  throw_error(ErrorCode::kInvalidArgument,
              str("reduce op ", int(op), ": expected kSum, kMax or kMin"));
}

void configure_nccl_emulation(const Topology& topology, int rank) {
  const std::string host_id = emulated_host_id(topology, rank);
  if (host_id.empty()) return;
  // NCCL groups ranks into hosts by a hash of NCCL_HOSTID (by default hostname + boot id),
  // computed once per process. With one id per emulated machine NCCL treats the machines as
  // separate hosts: no P2P, SHM or NVLink paths between them, so its network transport
  // (sockets over loopback on one host) carries the cross-machine traffic, as between real
  // machines. That transport needs an interface; loopback connects every emulated machine of
  // this host. Everything else is left to NCCL and the user's environment.
  const char* previous = std::getenv("NCCL_HOSTID");
  if (previous != nullptr && host_id != previous) {
    TESSERA_LOG(kInfo, "NCCL_HOSTID was '", previous, "'; emulated machines set it to '", host_id,
                "'");
  }
  setenv("NCCL_HOSTID", host_id.c_str(), 1);
  if (std::getenv("NCCL_SOCKET_IFNAME") == nullptr) setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  // Sockets, not an InfiniBand loopback, so the emulated link is the same on every machine.
  if (std::getenv("NCCL_NET") == nullptr) setenv("NCCL_NET", "Socket", 0);
  TESSERA_LOG(kDebug, "rank ", rank, ": NCCL_HOSTID=", host_id,
              " NCCL_SOCKET_IFNAME=", std::getenv("NCCL_SOCKET_IFNAME"));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create_world(Bootstrap& bootstrap,
                                                                 const Topology& topology,
                                                                 int device,
                                                                 const std::string& name) {
  const int rank = bootstrap.rank();
  const int size = bootstrap.size();
  TESSERA_CHECK_ARG(topology.world_size == size, "topology has ", topology.world_size,
                    " ranks but the bootstrap has ", size, "; expected the same ranks");
  configure_nccl_emulation(topology, rank);
  TESSERA_CUDA_CHECK(cudaSetDevice(device));

  struct UniqueIdMessage {
    ncclResult_t status;
    ncclUniqueId id;
  } message{};
  if (rank == 0) message.status = ncclGetUniqueId(&message.id);
  bootstrap.broadcast(&message, sizeof(message), 0);
  TESSERA_CHECK(message.status == ncclSuccess, ErrorCode::kNccl,
                "ncclGetUniqueId failed on rank 0: ", ncclGetErrorString(message.status));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = kNcclNonblocking.get() ? 0 : 1;
  ncclComm_t comm = nullptr;
  std::unique_ptr<HostCallWatchdog> watchdog =
      make_watchdog(config, str("rank ", rank, " on group '", name, "' (", size, " ranks)"));
  ncclResult_t result;
  {
    WatchdogScope scope(watchdog.get(), "NCCL communicator init", 1);
    result = ncclCommInitRankConfig(&comm, size, message.id, rank, &config);
  }
  if (result != ncclSuccess && result != ncclInProgress) {
    std::string text = nccl_error_text(result, comm);
    if (comm) ncclCommAbort(comm);
    throw_error(ErrorCode::kNccl, str("rank ", rank, ": ncclCommInitRankConfig for '", name, "' (",
                                      size, " ranks) failed: ", text));
  }
  std::vector<int> global_ranks(size);
  for (int r = 0; r < size; ++r) global_ranks[r] = r;
  // The object owns comm from here on, so every failure below releases it.
  std::unique_ptr<NcclCommunicator> communicator(
      new NcclCommunicator(comm, device, rank, std::move(global_ranks), name, std::move(watchdog)));
  communicator->wait_ready(
      comm, str("init of NCCL communicator '", name, "'"),
      str("rank ", rank, ": NCCL communicator '", name, "' init did not complete in ",
          wait_timeout_ms(), " ms: a peer never joined"));
  TESSERA_LOG(kDebug, "rank ", rank, ": NCCL communicator '", name, "' ready (", size,
              " ranks, cuda:", device, ")");
  return communicator;
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, int rank,
                                   std::vector<int> global_ranks, std::string name,
                                   std::unique_ptr<HostCallWatchdog> watchdog)
    : comm_(comm),
      device_(device),
      rank_(rank),
      size_(int(global_ranks.size())),
      global_ranks_(std::move(global_ranks)),
      name_(std::move(name)),
      watchdog_(std::move(watchdog)) {
  try {
    TESSERA_CUDA_CHECK(cudaSetDevice(device_));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&sync_event_, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&setup_stream_, cudaStreamNonBlocking));
    const size_t scratch_bytes = kBarrierScratchBytes + size_t(size_ + 1) * 2 * sizeof(int);
    // Stream-ordered on the setup stream: cudaMalloc/cudaFree may synchronize the whole device,
    // which would wait on other groups' work (possibly work waiting for this split).
    TESSERA_CUDA_CHECK(cudaMallocAsync(&scratch_, scratch_bytes, setup_stream_));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, scratch_bytes, setup_stream_));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(setup_stream_));
  } catch (...) {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    if (sync_event_) cudaEventDestroy(sync_event_);
    if (scratch_) cudaFreeAsync(scratch_, setup_stream_);
    if (setup_stream_) cudaStreamDestroy(setup_stream_);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    // Finalize flushes outstanding work (bounded), then destroy; abort when that fails.
    WatchdogScope scope(watchdog_.get(), "NCCL communicator finalize", op_count_ + 1);
    ncclResult_t state = ncclCommFinalize(comm_);
    if (state == ncclSuccess || state == ncclInProgress) {
      const auto deadline = deadline_after_timeout();
      Backoff backoff;
      while (true) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
        if (state != ncclInProgress || Clock::now() >= deadline) break;
        backoff.pause();
      }
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      TESSERA_LOG(kWarn, "rank ", global_ranks_[rank_], ": NCCL communicator '", name_,
                  "' did not finalize (", ncclGetErrorString(state), "); aborting it");
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  // The communicator is finalized or aborted: no NCCL work uses the scratch any more.
  if (sync_event_) cudaEventDestroy(sync_event_);
  if (scratch_) cudaFreeAsync(scratch_, setup_stream_);
  if (setup_stream_) cudaStreamDestroy(setup_stream_);
  cudaGetLastError();
}

int NcclCommunicator::global_rank(int group_rank) const {
  TESSERA_CHECK_ARG(group_rank >= 0 && group_rank < size_, "global_rank(group_rank = ", group_rank,
                    "): group '", name_, "' has ", size_, " ranks");
  return global_ranks_[group_rank];
}

void NcclCommunicator::check_usable(const char* op) const {
  TESSERA_CHECK(aborted_reason_.empty(), ErrorCode::kPeerFailure, op, " on group '", name_,
                "': the communicator was aborted earlier (", aborted_reason_,
                "); create a new one");
}

cudaStream_t NcclCommunicator::stream_of(const Stream& s, const char* op) const {
  TESSERA_CHECK_ARG(s.backend() == Backend::kCuda, op, " on group '", name_, "': stream is a ",
                    backend_name(s.backend()), " stream; expected a cuda stream on cuda:", device_);
  TESSERA_CHECK_ARG(s.device().index == device_, op, " on group '", name_, "': stream is on ",
                    s.device().to_string(), "; expected cuda:", device_,
                    " (the communicator's GPU)");
  return static_cast<cudaStream_t>(s.cuda_stream());
}

cudaStream_t NcclCommunicator::begin_op(const Stream& s, const char* op) {
  check_usable(op);
  cudaStream_t stream = stream_of(s, op);
  ++op_count_;
  current_op_ = op;
  return stream;
}

void NcclCommunicator::check_tensor(const TensorView& t, const char* op, const char* what) const {
  const std::string where = str(op, " ", what);
  check_contiguous(t, where.c_str());
  check_device(t, Device::cuda(device_), where.c_str());
}

void NcclCommunicator::abort_and_throw(ErrorCode code, const std::string& message) {
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
  aborted_reason_ = message;
  throw_error(code, message);
}

void NcclCommunicator::wait_ready(ncclComm_t comm, const std::string& what,
                                  const std::string& timeout_message) {
  const auto deadline = deadline_after_timeout();
  Backoff backoff;
  while (true) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    if (query != ncclSuccess) state = query;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      const std::string message = str("rank ", global_ranks_[rank_], ": ", what, " on group '",
                                      name_, "' failed: ", nccl_error_text(state, comm));
      if (comm == comm_) abort_and_throw(ErrorCode::kNccl, message);
      ncclCommAbort(comm);
      throw_error(ErrorCode::kNccl, message);
    }
    if (Clock::now() >= deadline) {
      if (comm == comm_) abort_and_throw(ErrorCode::kTimeout, timeout_message);
      ncclCommAbort(comm);
      throw_error(ErrorCode::kTimeout, timeout_message);
    }
    backoff.pause();
  }
}

void NcclCommunicator::finish_call(ncclResult_t result, const char* op) {
  if (result == ncclSuccess) return;
  if (result == ncclInProgress) {
    // Inside a group NCCL only records the call; group_end() polls the whole group.
    if (group_depth_ > 0) {
      group_pending_ = true;
      return;
    }
    wait_ready(
        comm_, last_operation(),
        str("rank ", global_ranks_[rank_], ": ", last_operation(), " on group '", name_, "' (",
            size_, " ranks) could not be enqueued within ", wait_timeout_ms(), " ms"));
    return;
  }
  throw_error(ErrorCode::kNccl,
              str("rank ", global_ranks_[rank_], ": ", op, " (", last_operation(), ") on group '",
                  name_, "' failed: ", nccl_error_text(result, comm_)));
}

template <typename Call>
void NcclCommunicator::enqueue(const char* nccl_call, Call&& call) {
  ncclResult_t result;
  {
    WatchdogScope scope(watchdog_.get(), current_op_, op_count_);
    result = call();
  }
  finish_call(result, nccl_call);
}

void NcclCommunicator::all_to_all(const TensorView& send, const TensorView& recv, const Stream& s) {
  check_usable("all_to_all");
  check_tensor(send, "all_to_all", "send");
  check_tensor(recv, "all_to_all", "recv");
  check_dtype(recv, send.dtype(), "all_to_all recv (must match send)");
  TESSERA_CHECK_ARG(send.numel() % size_ == 0, "all_to_all: send has ", send.numel(),
                    " elements; expected a multiple of the group size ", size_, " (group '", name_,
                    "')");
  TESSERA_CHECK_ARG(recv.numel() >= send.numel(), "all_to_all: recv has ", recv.numel(),
                    " elements; expected at least send's ", send.numel());
  cudaStream_t stream = begin_op(s, "all_to_all");
  const size_t count = size_t(send.numel() / size_);
  enqueue("ncclAlltoAll", [&] {
    return ncclAlltoAll(send.data(), recv.data(), count, nccl_dtype(send.dtype()), comm_, stream);
  });
}

void NcclCommunicator::all_gather(const TensorView& send, const TensorView& recv, const Stream& s) {
  check_usable("all_gather");
  check_tensor(send, "all_gather", "send");
  check_tensor(recv, "all_gather", "recv");
  check_dtype(recv, send.dtype(), "all_gather recv (must match send)");
  TESSERA_CHECK_ARG(recv.numel() >= send.numel() * size_, "all_gather: recv has ", recv.numel(),
                    " elements; expected at least group size ", size_, " x send's ", send.numel(),
                    " = ", send.numel() * size_);
  cudaStream_t stream = begin_op(s, "all_gather");
  enqueue("ncclAllGather", [&] {
    return ncclAllGather(send.data(), recv.data(), size_t(send.numel()), nccl_dtype(send.dtype()),
                         comm_, stream);
  });
}

void NcclCommunicator::reduce_scatter(const TensorView& send, const TensorView& recv, ReduceOp op,
                                      const Stream& s) {
  check_usable("reduce_scatter");
  check_tensor(send, "reduce_scatter", "send");
  check_tensor(recv, "reduce_scatter", "recv");
  check_dtype(recv, send.dtype(), "reduce_scatter recv (must match send)");
  TESSERA_CHECK_ARG(send.numel() % size_ == 0, "reduce_scatter: send has ", send.numel(),
                    " elements; expected a multiple of the group size ", size_, " (group '", name_,
                    "')");
  const int64_t count = send.numel() / size_;
  TESSERA_CHECK_ARG(recv.numel() >= count, "reduce_scatter: recv has ", recv.numel(),
                    " elements; expected at least send's ", send.numel(), " / ", size_, " = ",
                    count);
  const ncclRedOp_t nccl_op = nccl_reduce_op(op);
  cudaStream_t stream = begin_op(s, "reduce_scatter");
  enqueue("ncclReduceScatter", [&] {
    return ncclReduceScatter(send.data(), recv.data(), size_t(count), nccl_dtype(send.dtype()),
                             nccl_op, comm_, stream);
  });
}

void NcclCommunicator::all_reduce(const TensorView& send, const TensorView& recv, ReduceOp op,
                                  const Stream& s) {
  check_usable("all_reduce");
  check_tensor(send, "all_reduce", "send");
  check_tensor(recv, "all_reduce", "recv");
  check_dtype(recv, send.dtype(), "all_reduce recv (must match send)");
  TESSERA_CHECK_ARG(recv.numel() >= send.numel(), "all_reduce: recv has ", recv.numel(),
                    " elements; expected at least send's ", send.numel());
  const ncclRedOp_t nccl_op = nccl_reduce_op(op);
  cudaStream_t stream = begin_op(s, "all_reduce");
  enqueue("ncclAllReduce", [&] {
    return ncclAllReduce(send.data(), recv.data(), size_t(send.numel()), nccl_dtype(send.dtype()),
                         nccl_op, comm_, stream);
  });
}

void NcclCommunicator::send(const TensorView& data, int peer, const Stream& s) {
  check_usable("send");
  check_tensor(data, "send", "data");
  TESSERA_CHECK_ARG(peer >= 0 && peer < size_, "send(peer = ", peer, "): group '", name_,
                    "' has ranks 0..", size_ - 1);
  cudaStream_t stream = begin_op(s, "send");
  enqueue("ncclSend", [&] {
    return ncclSend(data.data(), size_t(data.numel()), nccl_dtype(data.dtype()), peer, comm_,
                    stream);
  });
}

void NcclCommunicator::recv(const TensorView& data, int peer, const Stream& s) {
  check_usable("recv");
  check_tensor(data, "recv", "data");
  TESSERA_CHECK_ARG(peer >= 0 && peer < size_, "recv(peer = ", peer, "): group '", name_,
                    "' has ranks 0..", size_ - 1);
  cudaStream_t stream = begin_op(s, "recv");
  enqueue("ncclRecv", [&] {
    return ncclRecv(data.data(), size_t(data.numel()), nccl_dtype(data.dtype()), peer, comm_,
                    stream);
  });
}

void NcclCommunicator::group_begin() {
  check_usable("group_begin");
  TESSERA_NCCL_CHECK(ncclGroupStart());
  ++group_depth_;
}

void NcclCommunicator::group_end() {
  check_usable("group_end");
  TESSERA_CHECK_ARG(group_depth_ > 0, "group_end on group '", name_,
                    "' without a matching group_begin");
  --group_depth_;
  ncclResult_t result;
  {
    WatchdogScope scope(group_depth_ == 0 ? watchdog_.get() : nullptr, current_op_, op_count_);
    result = ncclGroupEnd();
  }
  if (group_depth_ > 0) {
    // An inner group_end only closes the nesting; the outermost one issues the work.
    TESSERA_CHECK(result == ncclSuccess || result == ncclInProgress, ErrorCode::kNccl,
                  "ncclGroupEnd (nested) on group '", name_,
                  "' failed: ", nccl_error_text(result, comm_));
    return;
  }
  const bool pending = group_pending_ || result == ncclInProgress;
  group_pending_ = false;
  if (result != ncclSuccess && result != ncclInProgress) {
    throw_error(ErrorCode::kNccl,
                str("rank ", global_ranks_[rank_], ": ncclGroupEnd after ", last_operation(),
                    " on group '", name_, "' failed: ", nccl_error_text(result, comm_)));
  }
  if (pending) {
    wait_ready(comm_, str("group ending with ", last_operation()),
               str("rank ", global_ranks_[rank_], ": the group ending with ", last_operation(),
                   " on group '", name_, "' (", size_, " ranks) could not be enqueued within ",
                   wait_timeout_ms(), " ms"));
  }
}

void NcclCommunicator::barrier(const Stream& s) {
  check_usable("barrier");
  cudaStream_t stream = begin_op(s, "barrier");
  float* scratch = static_cast<float*>(scratch_);
  // In place on zeros: the sum stays 0, and every rank must contribute before any finishes.
  enqueue("ncclAllReduce (barrier)",
          [&] { return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm_, stream); });
}

void NcclCommunicator::wait_stream(cudaStream_t stream, const std::string& what) {
  TESSERA_CUDA_CHECK(cudaEventRecord(sync_event_, stream));
  const auto deadline = deadline_after_timeout();
  Backoff backoff;
  while (true) {
    cudaError_t done = cudaEventQuery(sync_event_);
    if (done == cudaSuccess) return;
    if (done != cudaErrorNotReady) {
      // A trapped signal wait of a heap is the likelier root cause: report it first.
      throw_if_any_wait_timed_out();
      throw_error(ErrorCode::kCuda, str("rank ", global_ranks_[rank_], ": ", what, " on group '",
                                        name_, "' failed on the GPU: ", cudaGetErrorString(done)));
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
    if (query != ncclSuccess) state = query;
    if (state != ncclSuccess && state != ncclInProgress) {
      abort_and_throw(
          ErrorCode::kNccl,
          str("rank ", global_ranks_[rank_], ": NCCL reported an error during ", what,
              " on group '", name_, "' (", size_, " ranks): ", nccl_error_text(state, comm_)));
    }
    if (Clock::now() >= deadline) {
      abort_and_throw(ErrorCode::kTimeout,
                      str("rank ", global_ranks_[rank_], ": ", what, " on group '", name_, "' (",
                          size_, " ranks) did not complete within ", wait_timeout_ms(),
                          " ms; a peer did not take part"));
    }
    backoff.pause();
  }
}

void NcclCommunicator::synchronize(const Stream& s) {
  check_usable("synchronize");
  cudaStream_t stream = stream_of(s, "synchronize");
  wait_stream(stream, last_operation());
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  check_usable("split");
  TESSERA_CHECK_ARG(!name.empty(), "split of group '", name_,
                    "': name is empty; expected a name for messages");
  TESSERA_CHECK_ARG(group_depth_ == 0, "split of group '", name_,
                    "' inside group_begin/group_end; expected it outside a group");
  const int member_color = color < 0 ? -1 : color;

  // Every member learns the others' (color, key) so it can map the new group's ranks back to
  // the world. One all-gather over this communicator on the setup stream, into scratch.
  int* exchange = reinterpret_cast<int*>(static_cast<char*>(scratch_) + kBarrierScratchBytes);
  const int mine[2] = {member_color, key};
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(exchange, mine, sizeof(mine), cudaMemcpyHostToDevice, setup_stream_));
  ++op_count_;
  current_op_ = "split membership exchange";
  enqueue("ncclAllGather (split)", [&] {
    return ncclAllGather(exchange, exchange + 2, 2, ncclInt32, comm_, setup_stream_);
  });
  // Bounded wait first: a copy into pageable memory would block until the all-gather ends.
  wait_stream(setup_stream_, last_operation());
  std::vector<int> entries(size_t(size_) * 2);
  TESSERA_CUDA_CHECK(cudaMemcpy(entries.data(), exchange + 2, entries.size() * sizeof(int),
                                cudaMemcpyDeviceToHost));

  // NCCL orders the new group by key, then by rank in this group.
  std::vector<int> members;
  if (member_color >= 0) {
    for (int r = 0; r < size_; ++r) {
      if (entries[2 * r] == member_color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return entries[2 * a + 1] < entries[2 * b + 1]; });
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = kNcclNonblocking.get() ? 0 : 1;
  ncclComm_t child = nullptr;
  ++op_count_;
  current_op_ = "split";
  ncclResult_t result;
  {
    WatchdogScope scope(watchdog_.get(), current_op_, op_count_);
    result = ncclCommSplit(comm_, member_color < 0 ? NCCL_SPLIT_NOCOLOR : member_color, key, &child,
                           &config);
  }
  if (result != ncclSuccess && result != ncclInProgress) {
    if (child) ncclCommAbort(child);
    throw_error(ErrorCode::kNccl,
                str("rank ", global_ranks_[rank_], ": ncclCommSplit of group '", name_, "' into '",
                    name, "' failed: ", nccl_error_text(result, comm_)));
  }
  const std::string timeout_message =
      str("rank ", global_ranks_[rank_], ": ncclCommSplit of group '", name_, "' into '", name,
          "' did not complete within ", wait_timeout_ms(), " ms; a peer did not call split");
  if (child) wait_ready(child, str("split into '", name, "'"), timeout_message);
  wait_ready(comm_, str("split into '", name, "'"), timeout_message);
  if (member_color < 0) {
    if (child) ncclCommAbort(child);
    return nullptr;
  }
  TESSERA_CHECK(child != nullptr, ErrorCode::kInternal,
                "ncclCommSplit returned no communicator "
                "for color ",
                member_color, " on rank ", global_ranks_[rank_]);

  const int new_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
  int nccl_rank = -1;
  int nccl_count = -1;
  ncclCommUserRank(child, &nccl_rank);
  ncclCommCount(child, &nccl_count);
  if (nccl_rank != new_rank || nccl_count != int(members.size())) {
    ncclCommAbort(child);
    throw_error(ErrorCode::kInternal,
                str("split into '", name, "': NCCL made this rank ", nccl_rank, " of ", nccl_count,
                    " but the (color, key) exchange says ", new_rank, " of ", members.size()));
  }
  std::vector<int> global_ranks;
  global_ranks.reserve(members.size());
  for (int r : members) global_ranks.push_back(global_ranks_[r]);
  const int global_rank = global_ranks[size_t(new_rank)];
  const int new_size = int(global_ranks.size());
  return std::unique_ptr<Communicator>(new NcclCommunicator(
      child, device_, new_rank, std::move(global_ranks), name,
      make_watchdog(config,
                    str("rank ", global_rank, " on group '", name, "' (", new_size, " ranks)"))));
}

}  // namespace tessera::cuda_comm
