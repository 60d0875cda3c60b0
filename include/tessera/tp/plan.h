// TpPlan: how one tensor-parallel GEMM with fused communication runs (Flux), made once by
// plan_tp() (planner.h) and run many times by TpOperation (operation.h).
//
// Tiles. Output rows are cut per row block of one rank (a source rank's rows for AllGather,
// an owner's rows for ReduceScatter, this rank's rows for AllToAll), so no GEMM tile needs
// rows of two ranks; columns are cut per owner's column block for AllToAll. tile_schedule()
// lists a rank's tiles in the order it computes them, the kernel's tile-order hook:
//   AllGather+GEMM    the local rows first, then the other ranks' rows in the order their
//                     communication tiles arrive (gather_order), each tile after the
//                     communication tiles covering its rows (prologue wait)
//   GEMM+ReduceScatter, GEMM+AllToAll   owners rank+1, rank+2, ..., rank last: ranks write to
//                     different owners at any moment (the paper's rank-swizzled order), the
//                     remote writes start first and the local tiles end the kernel
// Communication tiles (AllGather): each source's rows in chunks of comm_rows, one signal each.
// Signals: slot ids in [0, num_signal_slots()); AllGather uses one per (source, chunk) plus,
// for pull, one "rows ready" slot per source; ReduceScatter and AllToAll count tiles per source
// (kAdd) in one slot per source (two-level ReduceScatter: one more per source machine); then
// one "released" slot per consumer (released_signal).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tp/request.h"

namespace tessera::tp {

// AllGather: who moves a communication tile. kPush: the owner of the rows puts them into the
// peer's gather buffer and raises the peer's signal. kPull: the consumer gets them from the
// owner's buffer once the owner says they are there, then raises its own signal.
enum class Transfer : uint8_t { kPush, kPull };
const char* transfer_name(Transfer transfer);
// AllGather: kDirect sends every shard straight to every peer, in the order rank+1, rank+2, ...
// (NVLink/NVSwitch: every pair has its own link); kRing relays each shard along the ring
// rank -> rank+1 (PCIe: one link at a time), push only.
enum class Route : uint8_t { kDirect, kRing };
const char* route_name(Route route);

struct TpPlan {
  TpRequest request;
  bool fused = true;   // false: the unfused pair (GEMM and an NCCL collective)
  std::string reason;  // the planner's reason for fused or not, for `tessera plan --explain`
  int tile_m = 128;    // GEMM output tile
  int tile_n = 128;
  int64_t comm_rows = 0;  // AllGather: rows per communication tile (0: a whole shard)
  Transfer transfer = Transfer::kPush;
  Route route = Route::kDirect;
  // Several machines: cross-machine traffic moves once per pair of machines (AllGather: a shard
  // goes to the rank of the same local index on each other machine, which forwards it inside;
  // ReduceScatter: partials are summed inside each machine first, one sum crosses).
  bool two_level = false;
  // The planner's cost-model estimates (microseconds; 0 when not estimated).
  double gemm_us = 0;     // the GEMM alone
  double fused_us = 0;    // the fused operation
  double unfused_us = 0;  // GEMM and collective one after the other
};

// Throws kInvalidArgument naming the field when a plan cannot be run: its request fails
// validate_request, tiles < 1, comm_rows < 0, kRing with kPull, two_level with one machine
// or an op other than AllGather/ReduceScatter, or more signals than `num_signal_slots`.
void validate_plan(const TpPlan& plan, int num_signal_slots);

// One GEMM output tile: rows [row_begin, row_begin + rows) of the output row space the op
// computes on this rank (global rows for AllGather and ReduceScatter, local rows for
// AllToAll), columns [col_begin, col_begin + cols). `block` is the rank whose rows (AllGather)
// or whose output (ReduceScatter, AllToAll) the tile belongs to.
struct TileTask {
  int block = 0;
  int64_t row_begin = 0, rows = 0;
  int64_t col_begin = 0, cols = 0;
};
// The tiles `rank` computes, in order.
std::vector<TileTask> tile_schedule(const TpPlan& plan, int rank);

// AllGather: source ranks in the order `rank` receives their rows, itself first. Every rank
// sends in the order rank+1, rank+2, ..., so pushed rows arrive from rank-1 first, then rank-2,
// ... (a ring relays them in that order too); pulled rows come from rank+1, rank+2, ...
// Two-level: the own machine's ranks (rank-1, rank-2, ... inside it), then machine-1,
// machine-2, ..., each led by the rank of this rank's local index (its sender), then the
// rest in the order that machine's ranks here forward them.
std::vector<int> gather_order(const TpPlan& plan, int rank);
// ReduceScatter, AllToAll: owners in the order `rank` writes to them (itself last).
std::vector<int> owner_order(const TpPlan& plan, int rank);

// AllGather's communication tiles of `source`: chunk c covers rows
// [source_begin + c * rows_per_chunk, ...) of that source's share.
int64_t num_chunks(const TpPlan& plan, int source);
RowRange chunk_rows(const TpPlan& plan, int source, int64_t chunk);
int64_t chunk_of_row(const TpPlan& plan, int source, int64_t row);  // row: global
// Signal slots.
int chunk_signal(const TpPlan& plan, int source, int64_t chunk);  // AllGather
int ready_signal(const TpPlan& plan, int source);                 // AllGather, pull
int count_signal(const TpPlan& plan, int source);  // ReduceScatter/AllToAll tiles from source
int relay_signal(const TpPlan& plan, int source);  // two-level ReduceScatter: into a relay
// The cuda protocols: `consumer` raises it at every sender once it no longer reads what they
// sent in the call (its GEMM read the gathered rows, its sum the partials); a sender's next
// call writes into the consumer's buffer after it, in place of a barrier.
int released_signal(const TpPlan& plan, int consumer);
int num_signal_slots(const TpPlan& plan);

std::string describe(const TpPlan& plan);  // one line: fused or not, tiles, transfer, route
std::string plan_to_json(const TpPlan& plan);

}  // namespace tessera::tp
