// y[B, N] = x[B, K] W[N, K]^T through cuBLASLt: row-major bf16/f16 in and out, f32
// accumulation, the layout of a Hugging Face Linear without bias. Plan once for N, K and the
// largest batch: descriptors and the heuristic's algorithm for every batch up to it are made
// here, so run() only launches (it can be captured in a CUDA graph).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::decode::detail {

class BlasLtLinear {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(4) << 20;

  BlasLtLinear(cublasLtHandle_t handle, DType dtype, int64_t n, int64_t k, int64_t max_batch);
  ~BlasLtLinear();
  BlasLtLinear(const BlasLtLinear&) = delete;
  BlasLtLinear& operator=(const BlasLtLinear&) = delete;

  // `workspace`: kWorkspaceBytes of device memory.
  void run(const void* x, const void* w, void* y, int64_t batch, void* workspace,
           cudaStream_t stream) const;

 private:
  struct PerBatch {
    cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  cublasLtHandle_t handle_;
  cublasLtMatmulDesc_t op_ = nullptr;
  std::vector<PerBatch> per_batch_;  // index batch - 1
};

}  // namespace tessera::decode::detail
