// TpLoopback: the P ranks of a fused tensor-parallel operation in one process on one GPU, so
// the fused kernels, their signals and their tile orders run on real hardware without several
// GPUs. Each rank has its own streams and buffers; its "peers" are the other ranks' buffers on
// the same device, and each rank's GEMM gets 1/P of the multiprocessors (less one, left to the
// copies), as if each rank had its own small GPU. Timings are not those of P GPUs: the ranks
// share the device's memory bandwidth; loopback checks correctness and what the hooks cost.
//
// Operations: AllGather+GEMM, pushed by copy engine (cudaMemcpyAsync into each peer's gather
// buffer, then cuStreamWriteValue64 raising the peer's arrival word for that communication
// tile: no multiprocessor involved), the GEMM kernel waiting per row tile (kernels/tp/).
// GEMM+ReduceScatter and GEMM+AllToAll are refused with kUnsupported until their epilogue hook
// exists. Weights [N, K] (kNK), bf16 or f16 in and out.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"
#include "tessera/tp/plan.h"

namespace tessera::tp {

class TpLoopback {
 public:
  // Throws kUnsupported naming what is not built (op, layout, dtype, transfer, route, several
  // machines, no GPU kernel for the tile), kInvalidArgument when the plan is invalid.
  TpLoopback(const TpPlan& plan, Device gpu);
  ~TpLoopback();
  TpLoopback(const TpLoopback&) = delete;
  TpLoopback& operator=(const TpLoopback&) = delete;

  const TpPlan& plan() const;
  std::string gemm_config() const;  // the GEMM configuration each rank runs

  // One call of the operation for every rank: a[r], b[r], bias[r] (empty views without bias)
  // and out[r] as rank_shapes(plan.request, r) says, on the GPU. `stream` orders the call: the
  // ranks start after its prior work, and its later work starts after every rank finished.
  // Returns after enqueueing; a rank that never receives its rows fails its wait after
  // timeout_ms with kTimeout naming both ranks (the CUDA context is lost then).
  void run(std::span<const TensorView> a, std::span<const TensorView> b,
           std::span<const TensorView> bias, std::span<const TensorView> out, const Stream& stream);

  // Rank `rank`'s GEMM alone, with every multiprocessor and every arrival already signalled:
  // the kernel with its hooks on and nothing to wait for, against the plain GEMM of the same
  // configuration (the hooks' cost). `gathered` is the whole [M, K] input.
  void run_hooked_gemm(int rank, const TensorView& gathered, const TensorView& b,
                       const TensorView& bias, const TensorView& out, const Stream& stream);

  void set_timeout_ms(int64_t timeout_ms);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::tp
