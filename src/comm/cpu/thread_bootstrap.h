// ThreadBootstrap: the Bootstrap of ranks that are threads of one process (the loopback ranks
// of comm/loopback.h). Its allgather is the cpu backend's all_gather on host bytes, so it is
// bounded by the wait timeout, names the ranks that never arrived, and stops with kPeerFailure
// when a rank's thread failed.
#pragma once

#include <memory>

#include "comm/cpu/cpu_communicator.h"
#include "tessera/comm/bootstrap.h"

namespace tessera::cpu {

class ThreadBootstrap final : public Bootstrap {
 public:
  ThreadBootstrap(std::shared_ptr<CpuWorld> world, int rank) : comm_(std::move(world), rank) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  int local_rank() const override { return comm_.rank(); }
  int local_size() const override { return comm_.size(); }
  const char* kind() const override { return "thread"; }
  void allgather(const void* send, void* recv, size_t bytes) override;

 private:
  CpuCommunicator comm_;
};

}  // namespace tessera::cpu
