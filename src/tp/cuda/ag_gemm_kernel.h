// One rank's fused AllGather+GEMM kernel, set up once for a plan (shared by TpOperation's cuda
// path and TpLoopback): the GEMM configuration (the rule's cooperative data-parallel tile: a
// split would split a tile's wait), the arrival tables on the GPU (the communication chunks
// each row tile waits for, the rank that sends each chunk), the rank's cluster order (the
// local rows first, then by when the last chunk a cluster needs arrives in gather_order), and
// the bands the kernel visits column by column (rows of one communication chunk: they arrive
// together), and the kernel's workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "comm/cuda/signal_kernels.h"
#include "tessera/core/buffer.h"
#include "tessera/gemm/gemm_config.h"
#include "tessera/tp/plan.h"
#include "tp/ag_gemm_launch.h"

namespace tessera::tp::detail {

// Throws kUnsupported, naming `who` and what is not built, unless the fused AllGather+GEMM
// kernel runs `plan` (ag_gemm, push, direct route, one machine, [N, K] weights, bf16/f16 in
// and the same out, K and N/P multiples of 8).
void check_ag_gemm_kernel_supports(const TpPlan& plan, const char* who);

class AgGemmKernel {
 public:
  // `config_sms`: the multiprocessors the rule picks the tile for; launches may use fewer.
  AgGemmKernel(const TpPlan& plan, int rank, Device gpu, int config_sms);

  const gemm::GemmConfig& config() const { return config_; }
  std::string config_name() const { return gemm::gemm_config_name(config_); }
  int64_t arrival_words() const { return arrival_words_; }  // signal slots the kernel reads

  // out[M, N/P] = gathered[M, K] x b[N/P, K]^T (+ bias), each row tile after
  // words[slot] >= expected for every chunk slot its rows come from. A wait longer than
  // timeout_ms is recorded in `log` (naming this rank and the sender) and traps.
  void launch(const void* gathered, const void* b, const void* bias, void* out,
              const uint64_t* words, uint64_t expected, int64_t timeout_ms,
              const cuda_comm::WaitTimeoutLog& log, int grid_sms, cudaStream_t stream) const;

 private:
  int rank_ = 0;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  int m_tiles_ = 0, m_clusters_ = 0, n_tiles_ = 0, band_clusters_ = 1;
  int64_t arrival_words_ = 0;
  gemm::GemmConfig config_;
  tp::kernels::AgGemmLauncher launcher_;
  Buffer tile_chunks_, chunk_source_, cluster_order_, workspace_;
  size_t workspace_bytes_ = 0;
};

}  // namespace tessera::tp::detail
