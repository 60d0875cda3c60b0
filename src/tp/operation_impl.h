// TpOperation's state, shared by the fused protocols (fused_protocols.cc) and the unfused
// pairs (unfused_pairs.cc).
#pragma once

#include <vector>

#include "tessera/comm/signal_slots.h"
#include "tessera/core/buffer.h"
#include "tessera/tp/operation.h"
#include "gemm/reference_gemm.h"
#include "tp_backend.h"

namespace tessera::tp {

// One run's operands, checked.
struct RunArgs {
  const TensorView& a;
  const TensorView& b;
  const TensorView& bias;  // empty without bias
  const TensorView& out;
  const Stream& stream;
};

struct TpOperation::Impl {
  RankContext& ctx;
  TpPlan plan;
  int rank = 0;
  int world = 1;
  int gpus_per_machine = 1;
  RankShapes shapes;
  SignalSlots signals;  // this operation's range of the heap's signal slots (fused)
  // Fused: the gather buffer [M, K] (AllGather), the partials [P][max_share][N] and, two-level,
  // the relay partials [machines][gpus_per_machine][max_share][N] (ReduceScatter), the
  // received output [M, N/P] (AllToAll); all symmetric.
  SymmetricBuffer gathered, partials, relay_partials, received;
  // Unfused: padded send/receive buffers for the Communicator's collectives.
  Buffer send, recv, product;
#ifdef TESSERA_WITH_CUDA
  std::unique_ptr<detail::CudaTpRunner> cuda_runner;  // every plan the cuda backend runs
#endif
  std::vector<float> acc, gemm_scratch;
  std::vector<std::byte> tile_bytes;

  Impl(RankContext& context, const TpPlan& p);

  int slot(int plan_slot) const {
    return signals.base() + plan_slot;
  }                           // heap slot id
  int64_t max_share() const;  // ceil(M / P): the padded share of the collectives
  gemm::detail::WeightOperand weight(const TensorView& b) const;
  // out = a_rows . b (+ bias) for one tile, into dst (row pitch ldd) in out_dtype.
  void compute_tile(const void* a_rows, int64_t lda, const TileTask& tile, const TensorView& b,
                    const void* bias, void* dst, int64_t ldd);

  void run_fused_all_gather(const RunArgs& args);
  void run_fused_reduce_scatter(const RunArgs& args);
  void run_fused_all_to_all(const RunArgs& args);
  void run_unfused(const RunArgs& args);
  void allocate_fused();
  void check_same_plan_everywhere();
  void allocate_unfused();
};

}  // namespace tessera::tp
