// Planning tensor-parallel GEMMs with fused communication: the cost model's estimate of a
// plan (a tile-level timeline, as the sim executor times sequence-parallel plans) and
// plan_tp(), which picks the communication tile, transfer, route and the two-level form, and
// falls back to the unfused pair (GEMM and an NCCL collective) where fusion would lose.
//
// The timeline (estimate()): the fused GEMM is one kernel whose rows cost
// gemm(M, N, K) / M each, gemm_fused_slowdown slower than the plain GEMM.
//   AllGather+GEMM     each communication tile arrives when its link (NVLink inside a machine,
//                      the network across; one queue per link class and receiving GPU) has
//                      carried it; the GEMM takes the blocks in gather_order, each after its
//                      tiles arrived.
//   GEMM+ReduceScatter each owner's partial block leaves when the GEMM finished it (one queue
//   GEMM+AllToAll      per link class on the sending GPU); the owner then sums the partials
//                      (a pass over them in HBM; ReduceScatter only).
// The unfused pair: the GEMM, then (AllGather: before) the collective at
// (P-1)/P * bytes / bandwidth + two_sided_step_us over the slowest link it crosses.
#pragma once

#include <string>

#include "tessera/comm/topology.h"
#include "tessera/sp/cost_model.h"
#include "tessera/tp/plan.h"

namespace tessera::tp {

struct TpEstimate {
  double gemm_us = 0;     // the GEMM alone (the paper's GEMM_non-split)
  double comm_us = 0;     // the collective alone
  double fused_us = 0;    // the fused operation
  double unfused_us = 0;  // GEMM and collective one after the other
  // The paper's overlap efficiency: 1 - (fused - gemm) / (unfused - gemm).
  double overlap_efficiency() const;
};

// The cost model's times for `plan` on `topology` (intra-machine link: the class of ranks 0
// and 1 of machine 0; cross-machine: the class between machines 0 and 1).
TpEstimate estimate(const TpPlan& plan, const Topology& topology, const sp::CostModel& cost);

struct TpPlanOptions {
  enum class Fuse { kAuto, kFused, kUnfused };
  Fuse fuse = Fuse::kAuto;
  int64_t comm_rows = -1;  // AllGather's communication tile; -1: the planner's pick
  int tile_m = 128;
  int tile_n = 128;
  int num_signal_slots = 1024;  // the heap's (SymmetricHeap::num_signal_slots())
  // With kAuto: the GPU whose rows of the tuning table (tp/tune_table.h, read from
  // tp_tune_table_path()) decide fusion where one matches the request, instead of the cost
  // model; empty: the cost model alone.
  std::string tuned_gpu;
};

// Throws kInvalidArgument naming the request field (validate_request) or option.
TpPlan plan_tp(const TpRequest& request, const Topology& topology, const sp::CostModel& cost,
               const TpPlanOptions& options = {});

}  // namespace tessera::tp
