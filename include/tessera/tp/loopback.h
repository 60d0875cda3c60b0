// TpLoopback: the P ranks of a fused tensor-parallel operation in one process on one GPU, so
// the fused operations, their signals, copies and tile orders run on real hardware without
// several GPUs. It runs TpOperation's cuda path, the code that runs across GPUs, on P loopback
// ranks (comm/loopback.h): each rank's kernels on 1/P of the multiprocessors (less one, left to
// the copies), as if each rank had its own small GPU, its "peers" the other ranks' symmetric
// buffers in the same device memory. Timings are not those of P GPUs: the ranks share the
// device's memory bandwidth; loopback checks correctness and what the protocols cost.
//
// Operations: the three fused ones as the cuda backend builds them inside one machine
// (AllGather+GEMM with weights [N, K] and bf16/f16 in and out; GEMM+ReduceScatter and
// GEMM+AllToAll with either weight layout, bf16/f16 in, bf16/f16/f32 out; tp_backend.h).
// The plan runs fused (plan.fused is taken as true).
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
  int rank_sms() const;  // the multiprocessors each rank's kernels stay on
  // ag_gemm: the fused kernel's GEMM configuration; gemm_rs and gemm_a2a run Gemm's pick per
  // owner's rows (or columns) and report "".
  std::string gemm_config() const;

  // One call of the operation for every rank: a[r], b[r], bias[r] (empty views without bias)
  // and out[r] with the elements rank_shapes(plan.request, r) says, on the GPU. `stream`
  // orders the call: the ranks start after its prior work, and its later work starts after
  // every rank finished. Returns after enqueueing; a rank whose wait for a peer exceeds the
  // wait timeout fails with kTimeout naming both ranks.
  void run(std::span<const TensorView> a, std::span<const TensorView> b,
           std::span<const TensorView> bias, std::span<const TensorView> out, const Stream& stream);

  // ag_gemm only: rank `rank`'s fused kernel alone, with every multiprocessor and every
  // arrival already signalled: the kernel with its hooks on and nothing to wait for, against
  // the plain GEMM of the same configuration (the hooks' cost). `gathered` is the whole
  // [M, K] input. The other operations' hooks sit outside their GEMMs (kUnsupported).
  void run_hooked_gemm(int rank, const TensorView& gathered, const TensorView& b,
                       const TensorView& bias, const TensorView& out, const Stream& stream);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::tp
