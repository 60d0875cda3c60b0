// TpOperation: one tensor-parallel GEMM with its communication (request.h), planned once
// (planner.h) and run per layer call. Every rank of the context constructs it with the same
// plan (collective: it allocates its symmetric buffers), then calls run() with its own
// operands (rank_shapes()).
//
// A fused plan runs the Flux protocol on the symmetric heap: AllGather's communication tiles
// are put (or got) with a signal each and every GEMM tile waits for the tiles covering its
// rows; ReduceScatter's and AllToAll's GEMM tiles are stored into their owner's buffer with a
// signal counted per source, in the rank-swizzled order of tile_schedule(); ReduceScatter's
// owner sums the partials in rank order in float32 (deterministic). Each run starts with a
// heap barrier (nobody overwrites a buffer a peer still reads) and ends with this rank's
// signals reset. An unfused plan runs the GEMM and the Communicator's collective one after
// the other. Every wait is bounded by the heap's timeout and names the rank waited for.
//
// Backends: cpu (rank threads, a float32 tile GEMM: the protocol CI checks, fused and unfused);
// cuda runs unfused plans (cuBLASLt and NCCL), fused AllGather+GEMM across the GPUs of one
// machine (copy-engine pushes into the peers' gather buffers, a stream-written signal per
// communication chunk, Hopper GEMM kernel waiting per row tile: src/tp/cuda/) and fused
// GEMM+ReduceScatter there (a GEMM per owner, its rows sent by copy engine as it finishes);
// fused AllToAll, fused plans across machines and AllGather with [K, N] weights are refused
// there with kUnsupported. Destroying an operation releases its symmetric
// buffers (collective like the construction).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"
#include "tessera/tp/plan.h"
#include "tessera/tp/planner.h"

namespace tessera::tp {

// When a phase of a run ended (a communication step, a GEMM, a wait), in us since the run
// began on this rank's stream.
struct TpPhase {
  std::string name;
  double us = 0;
};

// Why `plan`'s fused form cannot run on `backend` (empty: it can, or the plan is unfused): the
// cpu backend runs every fused plan; cuda builds fused AllGather+GEMM (what its kernel takes)
// and one-machine GEMM+ReduceScatter.
std::string fused_unsupported_reason(const TpPlan& plan, Backend backend);

// The symmetric-heap bytes a fused operation of `plan` allocates on every rank (its buffers,
// each at least one byte, before the heap aligns them); 0 for an unfused plan. A context's
// ContextOptions::heap_bytes must hold this and the alignment of three buffers.
size_t fused_symmetric_bytes(const TpPlan& plan);

// plan_tp (planner.h) for ctx's ranks: the request's world size and machine count are ctx's,
// the signal slots its heap's, the tuning-table rows those of its GPU (device_name), the cost
// model that of its topology; with Fuse::kAuto, a fused pick the backend does not build becomes
// the unfused pair (the reason says why). What `tessera bench tp` and tessera.tp plan with.
TpPlan plan_for_context(const RankContext& ctx, TpRequest request, TpPlanOptions options);

class TpOperation {
 public:
  // Collective over ctx's ranks. Throws kInvalidArgument when the plan's world size or machine
  // count differs from the context's, or the plan is invalid (validate_plan).
  TpOperation(RankContext& ctx, const TpPlan& plan);
  ~TpOperation();
  TpOperation(const TpOperation&) = delete;
  TpOperation& operator=(const TpOperation&) = delete;

  const TpPlan& plan() const;
  RankShapes shapes() const;  // this rank's operand shapes

  // a, b, out as rank_shapes() says, contiguous, on this rank's device; a and b of the
  // request's dtype, out of its out_dtype; bias: an empty view without bias, else [bias] of
  // out_dtype. Each mismatch is refused naming the argument.
  void run(const TensorView& a, const TensorView& b, const TensorView& bias, const TensorView& out,
           const Stream& stream);

  // Phase timing (`tessera bench tp --phases`): when on, each run records an event at the end
  // of every phase, and phases() returns the last run's, waiting for them. The cuda backend
  // times its phases; the cpu backend has none to report (empty).
  void time_phases(bool on);
  std::vector<TpPhase> phases() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::tp
