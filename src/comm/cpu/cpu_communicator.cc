// CpuCommunicator: two-sided collectives and point-to-point between rank threads
// (see cpu_communicator.h for the protocol).
#include "comm/cpu/cpu_communicator.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "comm/cpu/cpu_fault.h"
#include "comm/cpu/cpu_reduce.h"
#include "tessera/core/error.h"

namespace tessera::cpu {

namespace {

void check_cpu_stream(const Stream& s, const std::string& op) {
  TESSERA_CHECK_ARG(s.backend() == Backend::kCpu, op, ": stream is a ", backend_name(s.backend()),
                    " stream: expected a cpu stream");
}

// Contiguous, on the cpu, and backed by memory when it has elements.
void check_cpu_buffer(const TensorView& t, const std::string& what) {
  check_contiguous(t, what.c_str());
  check_device(t, Device::cpu(), what.c_str());
  TESSERA_CHECK_ARG(t.numel() == 0 || t.data() != nullptr, what, " = ", t.to_string(),
                    ": data is null");
}

size_t bytes_of(const TensorView& t) {
  return size_t(t.numel()) * t.element_size();
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

const std::byte* byte_ptr(const void* p) {
  return static_cast<const std::byte*>(p);
}
std::byte* byte_ptr(void* p) {
  return static_cast<std::byte*>(p);
}

// memcpy that accepts the null pointers of empty buffers.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace

CpuCommunicator::CpuCommunicator(std::shared_ptr<CpuWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {
  TESSERA_CHECK(world_ != nullptr && rank_ >= 0 && rank_ < world_->size(), ErrorCode::kInternal,
                "CpuCommunicator: rank ", rank_, " outside its group");
  num_recvs_from_.assign(world_->size(), 0);
}

int CpuCommunicator::global_rank(int group_rank) const {
  TESSERA_CHECK_ARG(group_rank >= 0 && group_rank < size(), "global_rank(", group_rank,
                    ") on group '", name(), "': expected 0..", size() - 1);
  return world_->global_rank(group_rank);
}

void CpuCommunicator::run_collective(
    const std::string& op, Contribution mine, bool lends_buffers,
    const std::function<void(CollectiveSlot&, uint64_t seq)>& body) {
  fault_point(op.c_str());
  const uint64_t seq = ++num_collectives_;
  // In-place use: peers must read a copy, since this rank overwrites recv while they read.
  std::vector<std::byte> staged;
  if (overlaps(mine.send, mine.send_bytes, mine.recv, mine.recv_bytes)) {
    staged.assign(byte_ptr(mine.send), byte_ptr(mine.send) + mine.send_bytes);
    mine.send = staged.data();
  }
  std::shared_ptr<CollectiveSlot> slot = world_->arrive(rank_, seq, op, mine);
  struct Release {
    CpuWorld& world;
    uint64_t seq;
    CollectiveSlot& slot;
    ~Release() { world.release(seq, slot); }
  } release{*world_, seq, *slot};
  body(*slot, seq);
  world_->finish(rank_, seq, op, *slot, lends_buffers);
}

void CpuCommunicator::check_same_shape(const CollectiveSlot& slot, const std::string& op,
                                       uint64_t seq) const {
  const Contribution& first = slot.contributions[0];
  for (int r = 1; r < size(); ++r) {
    const Contribution& c = slot.contributions[r];
    TESSERA_CHECK_ARG(c.dtype == first.dtype && c.count == first.count, op, " #", seq,
                      " on group '", name(), "': rank 0 passes ", first.count, " ",
                      dtype_name(first.dtype), " elements but rank ", r, " passes ", c.count, " ",
                      dtype_name(c.dtype), ": expected the same count and dtype on every rank");
  }
}

void CpuCommunicator::all_to_all(const TensorView& send, const TensorView& recv, const Stream& s) {
  const std::string op = "all_to_all";
  check_cpu_stream(s, op);
  check_cpu_buffer(send, op + " send");
  check_cpu_buffer(recv, op + " recv");
  check_dtype(recv, send.dtype(), (op + " recv").c_str());
  TESSERA_CHECK_ARG(send.numel() % size() == 0, op, " send = ", send.to_string(), " has ",
                    send.numel(), " elements: expected a multiple of the group size ", size(),
                    " of group '", name(), "'");
  check_min_bytes(recv, bytes_of(send), (op + " recv").c_str());

  const size_t block_bytes = bytes_of(send) / size_t(size());
  Contribution mine{send.data(),    recv.data(),  bytes_of(send),
                    bytes_of(send), send.dtype(), send.numel()};
  run_collective(op, mine, true, [&](CollectiveSlot& slot, uint64_t seq) {
    check_same_shape(slot, op, seq);
    for (int peer = 0; peer < size(); ++peer) {
      copy_bytes(byte_ptr(recv.data()) + size_t(peer) * block_bytes,
                 byte_ptr(slot.contributions[peer].send) + size_t(rank_) * block_bytes,
                 block_bytes);
    }
  });
}

void CpuCommunicator::all_gather(const TensorView& send, const TensorView& recv, const Stream& s) {
  const std::string op = "all_gather";
  check_cpu_stream(s, op);
  check_cpu_buffer(send, op + " send");
  check_cpu_buffer(recv, op + " recv");
  check_dtype(recv, send.dtype(), (op + " recv").c_str());
  const size_t block_bytes = bytes_of(send);
  check_min_bytes(recv, block_bytes * size_t(size()), (op + " recv").c_str());

  Contribution mine{send.data(),  recv.data(), block_bytes, block_bytes * size_t(size()),
                    send.dtype(), send.numel()};
  run_collective(op, mine, true, [&](CollectiveSlot& slot, uint64_t seq) {
    check_same_shape(slot, op, seq);
    for (int peer = 0; peer < size(); ++peer) {
      copy_bytes(byte_ptr(recv.data()) + size_t(peer) * block_bytes, slot.contributions[peer].send,
                 block_bytes);
    }
  });
}

void CpuCommunicator::reduce_scatter(const TensorView& send, const TensorView& recv,
                                     ReduceOp op_kind, const Stream& s) {
  const std::string op = str("reduce_scatter(", reduce_op_name(op_kind), ")");
  check_cpu_stream(s, op);
  check_cpu_buffer(send, op + " send");
  check_cpu_buffer(recv, op + " recv");
  check_dtype(recv, send.dtype(), (op + " recv").c_str());
  TESSERA_CHECK(is_reducible(send.dtype()), ErrorCode::kUnsupported, op, " of dtype ",
                dtype_name(send.dtype()), ": expected f32, f16, bf16, i32, i64 or u64");
  TESSERA_CHECK_ARG(send.numel() % size() == 0, op, " send = ", send.to_string(), " has ",
                    send.numel(), " elements: expected a multiple of the group size ", size(),
                    " of group '", name(), "'");
  const int64_t block = send.numel() / size();
  const size_t block_bytes = size_t(block) * send.element_size();
  check_min_bytes(recv, block_bytes, (op + " recv").c_str());

  Contribution mine{send.data(),  recv.data(),  bytes_of(send),  block_bytes,
                    send.dtype(), send.numel(), int64_t(op_kind)};
  run_collective(op, mine, true, [&](CollectiveSlot& slot, uint64_t seq) {
    check_same_shape(slot, op, seq);
    std::vector<const void*> inputs(size());
    for (int peer = 0; peer < size(); ++peer) {
      inputs[peer] = byte_ptr(slot.contributions[peer].send) + size_t(rank_) * block_bytes;
    }
    reduce_into(recv.data(), inputs, block, send.dtype(), op_kind);
  });
}

void CpuCommunicator::all_reduce(const TensorView& send, const TensorView& recv, ReduceOp op_kind,
                                 const Stream& s) {
  const std::string op = str("all_reduce(", reduce_op_name(op_kind), ")");
  check_cpu_stream(s, op);
  check_cpu_buffer(send, op + " send");
  check_cpu_buffer(recv, op + " recv");
  check_dtype(recv, send.dtype(), (op + " recv").c_str());
  TESSERA_CHECK(is_reducible(send.dtype()), ErrorCode::kUnsupported, op, " of dtype ",
                dtype_name(send.dtype()), ": expected f32, f16, bf16, i32, i64 or u64");
  check_min_bytes(recv, bytes_of(send), (op + " recv").c_str());

  Contribution mine{send.data(),  recv.data(),  bytes_of(send),  bytes_of(send),
                    send.dtype(), send.numel(), int64_t(op_kind)};
  run_collective(op, mine, true, [&](CollectiveSlot& slot, uint64_t seq) {
    check_same_shape(slot, op, seq);
    std::vector<const void*> inputs(size());
    for (int peer = 0; peer < size(); ++peer) inputs[peer] = slot.contributions[peer].send;
    reduce_into(recv.data(), inputs, send.numel(), send.dtype(), op_kind);
  });
}

void CpuCommunicator::send(const TensorView& data, int peer, const Stream& s) {
  check_cpu_stream(s, "send");
  check_cpu_buffer(data, "send data");
  TESSERA_CHECK_ARG(peer >= 0 && peer < size(), "send: peer = ", peer, ": expected 0..", size() - 1,
                    " of group '", name(), "'");
  if (group_depth_ > 0) {
    pending_.push_back({true, data, peer});
  } else {
    issue_send(data, peer);
  }
}

void CpuCommunicator::recv(const TensorView& data, int peer, const Stream& s) {
  check_cpu_stream(s, "recv");
  check_cpu_buffer(data, "recv data");
  TESSERA_CHECK_ARG(peer >= 0 && peer < size(), "recv: peer = ", peer, ": expected 0..", size() - 1,
                    " of group '", name(), "'");
  if (group_depth_ > 0) {
    pending_.push_back({false, data, peer});
  } else {
    issue_recv(data, peer);
  }
}

void CpuCommunicator::issue_send(const TensorView& data, int peer) {
  fault_point("send");
  Message m;
  m.dtype = data.dtype();
  m.count = data.numel();
  if (bytes_of(data) > 0) {
    m.bytes.assign(byte_ptr(data.data()), byte_ptr(data.data()) + bytes_of(data));
  }
  world_->post(rank_, peer, std::move(m));
}

void CpuCommunicator::issue_recv(const TensorView& data, int peer) {
  fault_point("recv");
  const uint64_t idx = ++num_recvs_from_[peer];
  Message m = world_->take(peer, rank_, idx);
  TESSERA_CHECK_ARG(m.dtype == data.dtype() && m.count == data.numel(), "recv #", idx, " from ",
                    world_->ranks_label({peer}), " on group '", name(), "': the peer sent ",
                    m.count, " ", dtype_name(m.dtype),
                    " elements but recv data = ", data.to_string(),
                    ": expected the same count and dtype on both sides");
  copy_bytes(data.data(), m.bytes.data(), m.bytes.size());
}

void CpuCommunicator::group_begin() {
  ++group_depth_;
}

void CpuCommunicator::group_end() {
  TESSERA_CHECK_ARG(group_depth_ > 0, "group_end on group '", name(),
                    "' without a matching group_begin");
  if (--group_depth_ > 0) return;
  std::vector<PendingTransfer> batch = std::move(pending_);
  pending_.clear();
  // Sends are buffered, so issuing all of them first lets every recv of the batch complete.
  for (const auto& t : batch) {
    if (t.is_send) issue_send(t.data, t.peer);
  }
  for (const auto& t : batch) {
    if (!t.is_send) issue_recv(t.data, t.peer);
  }
}

void CpuCommunicator::barrier(const Stream& s) {
  check_cpu_stream(s, "barrier");
  run_collective("barrier", Contribution{}, false, [](CollectiveSlot&, uint64_t) {});
}

void CpuCommunicator::synchronize(const Stream& s) {
  check_cpu_stream(s, "synchronize");
}

std::unique_ptr<Communicator> CpuCommunicator::split(int color, int key, const std::string& name) {
  Contribution mine;
  mine.arg0 = color;
  mine.arg1 = key;
  std::shared_ptr<CpuWorld> child;
  int child_rank = -1;
  run_collective("split", mine, false, [&](CollectiveSlot& slot, uint64_t) {
    if (color < 0) return;
    std::vector<int> members;
    for (int r = 0; r < size(); ++r) {
      if (slot.contributions[r].arg0 == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return slot.contributions[a].arg1 < slot.contributions[b].arg1;
    });
    child_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
    child = world_->child(slot, color, name, members);
  });
  if (!child) return nullptr;
  return std::make_unique<CpuCommunicator>(std::move(child), child_rank);
}

}  // namespace tessera::cpu
