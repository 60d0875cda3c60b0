// NcclCommunicator: the cuda Communicator, one ncclComm_t per group.
//
// Communicators are blocking (ncclConfig_t::blocking = 1): NCCL launches each collective on the
// calling thread. Host calls that can wait inside NCCL for a peer (init, split, finalize, a
// lazily connected first use) run under a HostCallWatchdog that ends the process with a
// message naming the call, rank and group after TESSERA_TIMEOUT_MS (host_call_watchdog.h).
// synchronize() polls the stream's event and the communicator's async error, bounded by
// wait_timeout_ms(); on timeout the communicator is aborted (ncclCommAbort, which also releases
// NCCL kernels stuck waiting for a peer) and kTimeout names the operation, the group and its
// size; the aborted communicator refuses further work. TESSERA_NCCL_NONBLOCKING=1 makes them
// non-blocking instead: every enqueue that returns ncclInProgress, init and split are then
// polled with ncclCommGetAsyncError and throw kTimeout, at a launch thread per collective.
//
// Operations map to ncclAlltoAll, ncclAllGather, ncclReduceScatter, ncclAllReduce,
// ncclSend/ncclRecv and ncclGroupStart/End; barrier() is a one-element all-reduce on scratch
// memory allocated at construction, so nothing on the hot path allocates or synchronizes.
//
// Emulated machines: configure_nccl_emulation() gives each emulated machine its own
// NCCL_HOSTID before the first NCCL call of the process (see the .cc for why).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <cstdint>

#include <memory>
#include <string>
#include <vector>

#include "comm/cuda/host_call_watchdog.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/comm/communicator.h"
#include "tessera/comm/topology.h"
#include "tessera/core/error.h"

namespace tessera::cuda_comm {

// The ncclDataType_t of a Tessera dtype.
ncclDataType_t nccl_dtype(DType dtype);
ncclRedOp_t nccl_reduce_op(ReduceOp op);

// When `topology` is emulated: sets NCCL_HOSTID to emulated_host_id(topology, rank) and
// NCCL_SOCKET_IFNAME=lo (unless set). Must run before this process' first NCCL call; a no-op
// for real topologies.
void configure_nccl_emulation(const Topology& topology, int rank);

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks: rank 0 makes the NCCL unique id, the bootstrap
  // broadcasts it, every rank joins. `device` must be current on the calling thread. Calls
  // configure_nccl_emulation(topology, rank) first.
  static std::unique_ptr<NcclCommunicator> create_world(Bootstrap& bootstrap,
                                                        const Topology& topology, int device,
                                                        const std::string& name = "world");
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int global_rank(int group_rank) const override;
  Backend backend() const override { return Backend::kCuda; }
  const std::string& name() const override { return name_; }

  void all_to_all(const TensorView& send, const TensorView& recv, const Stream& s) override;
  void all_gather(const TensorView& send, const TensorView& recv, const Stream& s) override;
  void reduce_scatter(const TensorView& send, const TensorView& recv, ReduceOp op,
                      const Stream& s) override;
  void all_reduce(const TensorView& send, const TensorView& recv, ReduceOp op,
                  const Stream& s) override;
  void send(const TensorView& data, int peer, const Stream& s) override;
  void recv(const TensorView& data, int peer, const Stream& s) override;
  void group_begin() override;
  void group_end() override;
  void barrier(const Stream& s) override;
  void synchronize(const Stream& s) override;
  // Blocking communicators: NCCL captures their launches on the calling thread.
  bool graph_capturable() const override { return watchdog_ != nullptr; }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  // The underlying communicator (null after an abort), for code that calls NCCL directly.
  ncclComm_t nccl_comm() const { return comm_; }
  int device() const { return device_; }
  // The name and number of the last operation enqueued, e.g. "all_gather #12".
  std::string last_operation() const {
    return op_count_ == 0 ? std::string(current_op_) : str(current_op_, " #", op_count_);
  }

 private:
  NcclCommunicator(ncclComm_t comm, int device, int rank, std::vector<int> global_ranks,
                   std::string name, std::unique_ptr<HostCallWatchdog> watchdog);

  void check_usable(const char* op) const;
  cudaStream_t stream_of(const Stream& s, const char* op) const;
  // Counts and names an operation; returns its stream.
  cudaStream_t begin_op(const Stream& s, const char* op);
  // Handles an enqueue's result: ncclInProgress is polled to completion (deferred to
  // group_end inside a group); errors throw kNccl naming `op`.
  void finish_call(ncclResult_t result, const char* op);
  // Makes one NCCL call (`call()`, named `nccl_call` in errors) under the watchdog, then
  // finish_call.
  template <typename Call>
  void enqueue(const char* nccl_call, Call&& call);
  // Polls ncclCommGetAsyncError on `comm` until it leaves ncclInProgress, bounded. On timeout
  // aborts `comm` (and this communicator when it is comm_) and throws kTimeout with
  // `timeout_message`; on an error state throws kNccl naming `what`.
  void wait_ready(ncclComm_t comm, const std::string& what, const std::string& timeout_message);
  // Blocks until `stream` reached its current end, bounded; aborts on timeout.
  void wait_stream(cudaStream_t stream, const std::string& what);
  [[noreturn]] void abort_and_throw(ErrorCode code, const std::string& message);
  void check_tensor(const TensorView& t, const char* op, const char* what) const;

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 0;
  std::vector<int> global_ranks_;
  std::string name_;
  std::string aborted_reason_;  // non-empty once aborted
  int group_depth_ = 0;
  bool group_pending_ = false;  // an enqueue returned ncclInProgress inside the group
  uint64_t op_count_ = 0;
  const char* current_op_ = "no operation";     // the last operation's name (a literal)
  std::unique_ptr<HostCallWatchdog> watchdog_;  // null for a non-blocking communicator
  cudaEvent_t sync_event_ = nullptr;
  cudaStream_t setup_stream_ = nullptr;  // split's membership exchange
  // Device scratch: [0] the barrier's float, then (size + 1) x 2 ints for split.
  void* scratch_ = nullptr;
};

}  // namespace tessera::cuda_comm
