// The AllGather+GEMM kernel's host-facing side (no CUTLASS types): the Hopper GEMM building
// block (kernels/gemm/) with two of its tensor-parallel hooks on, through its tile scheduler:
//   - tile order: the CTA-row clusters of the output are visited in `cluster_order` (the plan's
//     gather order: the local shard's rows first, then each peer's as it arrives), in bands of
//     `band_clusters` consecutive entries of that order (rows that arrive together): a band's
//     tiles are visited column by column, its row clusters fastest, so a band reads each tile of
//     B once while it sits in L2 (row by row, a wide B would stream from HBM once per row);
//   - prologue wait: before a CTA loads a tile's rows of A, its producer warp group waits until
//     every communication chunk those rows come from has arrived: words[c] >= expected (an
//     acquire load at system scope, then a proxy fence so the TMA loads see the data). A wait
//     longer than timeout_ns records who waited for whom (WaitTimeoutLog) and traps.
// A is the gathered [M, K] buffer the chunks land in; everything else is the plain GEMM's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "comm/cuda/signal_kernels.h"
#include "gemm/gemm_launch.h"

namespace tessera::tp::kernels {

struct ArrivalWait {
  const uint64_t* words = nullptr;         // this rank's arrival words, one per chunk
  const int32_t* tile_chunks = nullptr;    // [2 * m_tiles]: per row tile, first and end chunk
  const int32_t* chunk_source = nullptr;   // [chunks]: the rank that sends each chunk
  const int32_t* cluster_order = nullptr;  // [m_clusters]: visit order of row-tile clusters
  int m_tiles = 0;                         // row tiles of the problem (beyond: padding)
  int m_clusters = 0;                      // entries of cluster_order
  int n_tiles = 0;                         // column tiles of the problem
  int band_clusters = 1;                   // row clusters per band (>= 1)
  uint64_t expected = 0;                   // this call's epoch
  uint64_t timeout_ns = 0;
  int rank = 0;  // the waiting rank (timeout message)
  cuda_comm::WaitTimeoutRecord* record = nullptr;
  unsigned int* claim = nullptr;
};

struct AgGemmLauncher {
  cudaError_t (*launch)(const gemm::kernels::GemmProblem& problem, const gemm::GemmConfig& config,
                        const ArrivalWait& wait, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) = nullptr;
  size_t (*workspace_bytes)(const gemm::kernels::GemmProblem& problem,
                            const gemm::GemmConfig& config) = nullptr;
  explicit operator bool() const { return launch != nullptr; }
};

// Data-parallel cooperative tiles only (the split modes would split a tile's wait).
bool register_ag_gemm_kernel(gemm::kernels::GemmKey key, AgGemmLauncher launcher);
AgGemmLauncher find_ag_gemm_kernel(gemm::kernels::GemmKey key);

}  // namespace tessera::tp::kernels
