// CpuCommunicator: the Communicator of the cpu backend. Ranks are threads of one process;
// each rank owns one CpuCommunicator per group and all of them share the group's CpuWorld.
//
// Collectives rendezvous on CpuWorld (every rank posts its buffers), then each rank copies
// or reduces straight from its peers' buffers into its own recv, then waits until every rank
// finished reading before it returns (its buffers may be reused after that). A send buffer
// that overlaps the rank's own recv (in-place use) is first copied aside, so no rank reads
// memory its owner is overwriting. Reductions run over ranks in rank order, in float for
// f32/f16/bf16 (f16/bf16 rounded once at the end) and exactly (wrapping) for integers, so
// every rank's all_reduce result is bit-identical.
//
// send() copies into the peer's mailbox and returns (buffered), so two ranks that both send
// and then recv do not deadlock. Between group_begin() and group_end() sends and recvs are
// queued and issued at group_end(): all sends first, then the recvs in order.
// Every cpu stream runs inline, so synchronize() has nothing to wait for.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/cpu/cpu_world.h"
#include "tessera/comm/communicator.h"

namespace tessera::cpu {

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<CpuWorld> world, int rank);

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  int global_rank(int group_rank) const override;
  Backend backend() const override { return Backend::kCpu; }
  const std::string& name() const override { return world_->name(); }

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
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

 private:
  struct PendingTransfer {
    bool is_send = false;
    TensorView data;
    int peer = 0;
  };

  // Runs collective `op`: arrive with `mine`, call `body` with the slot once every rank
  // posted, then (when `lends_buffers`) wait until every rank finished reading.
  void run_collective(const std::string& op, Contribution mine, bool lends_buffers,
                      const std::function<void(CollectiveSlot&, uint64_t seq)>& body);
  // Same dtype and element count on every rank; identical check (and message) on each rank.
  void check_same_shape(const CollectiveSlot& slot, const std::string& op, uint64_t seq) const;
  void issue_send(const TensorView& data, int peer);
  void issue_recv(const TensorView& data, int peer);

  std::shared_ptr<CpuWorld> world_;
  int rank_;
  uint64_t num_collectives_ = 0;
  int group_depth_ = 0;
  std::vector<PendingTransfer> pending_;
  std::vector<uint64_t> num_recvs_from_;  // per peer, for messages
};

}  // namespace tessera::cpu
