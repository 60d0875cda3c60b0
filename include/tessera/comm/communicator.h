// Communicator: two-sided collectives and point-to-point transfers among a group of ranks,
// enqueued on a Stream. The cuda implementation is NCCL (ncclComm_t per group, sub-groups by
// ncclCommSplit); the cpu implementation moves bytes between rank threads.
//
// Conventions (nccl-tests' too): buffers are contiguous and of one dtype;
//   all_to_all:     send and recv hold size() equal blocks; block j of send goes to rank j
//                   and lands as block `rank()` of its recv.
//   all_gather:     recv = size() blocks of send.numel(), block r from rank r.
//   reduce_scatter: send = size() blocks of recv.numel(); recv = op over ranks of block rank().
// Ranks are group-local (0..size()-1); global_rank(r) maps back to the world.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"

namespace tessera {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int global_rank(int group_rank) const = 0;
  virtual Backend backend() const = 0;
  // A name for messages, e.g. "world" or "ulysses[0,1]".
  virtual const std::string& name() const = 0;

  virtual void all_to_all(const TensorView& send, const TensorView& recv, const Stream& s) = 0;
  virtual void all_gather(const TensorView& send, const TensorView& recv, const Stream& s) = 0;
  virtual void reduce_scatter(const TensorView& send, const TensorView& recv, ReduceOp op,
                              const Stream& s) = 0;
  virtual void all_reduce(const TensorView& send, const TensorView& recv, ReduceOp op,
                          const Stream& s) = 0;
  // Point to point. Between group_begin() and group_end() sends and receives are issued as
  // one batch (NCCL group semantics), so a rank may send to and receive from a peer at once.
  virtual void send(const TensorView& data, int peer, const Stream& s) = 0;
  virtual void recv(const TensorView& data, int peer, const Stream& s) = 0;
  virtual void group_begin() = 0;
  virtual void group_end() = 0;
  virtual void barrier(const Stream& s) = 0;

  // Blocks until the work this communicator enqueued on `s` finished, bounded by the wait
  // timeout. On timeout the communicator is aborted and kTimeout names the operation and
  // the ranks that had not arrived where the backend can tell.
  virtual void synchronize(const Stream& s) = 0;

  // Whether this communicator's collectives may be captured into a CUDA graph (and replayed
  // there, in the same order on every rank).
  virtual bool graph_capturable() const { return false; }

  // Collective over this communicator: ranks with the same `color` form a new group, ordered
  // by `key` (then rank). color < 0: not a member; returns nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // Collective: every rank passes the same list of disjoint groups of ranks (group-local
  // numbering). Returns the group containing this rank, or nullptr when in none. Throws
  // kInvalidArgument (on every rank) for out-of-range or repeated ranks.
  std::unique_ptr<Communicator> split_groups(const std::vector<std::vector<int>>& groups,
                                             const std::string& name);
};

// Group layouts used by the sequence-parallel methods. Each throws kInvalidArgument naming
// the argument when group_size does not divide world_size (or is < 1).
// Consecutive: {0..g-1}, {g..2g-1}, ...  (e.g. Ulysses inside a machine)
std::vector<std::vector<int>> contiguous_groups(int world_size, int group_size,
                                                const char* what = "group_size");
// Strided: {0, W/g, 2W/g, ...}, {1, ...}  (e.g. Ring across machines in USP)
std::vector<std::vector<int>> strided_groups(int world_size, int group_size,
                                             const char* what = "group_size");

}  // namespace tessera
