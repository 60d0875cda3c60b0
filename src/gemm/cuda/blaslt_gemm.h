// BlasLtGemm: out[M, N] = a[M, K] . b (+ bias[N]) through cuBLASLt (GemmShape: gemm.h), row-major, b stored as
// [K, N] or [N, K] (a Linear's weight), bf16/f16/f32 in, f32 accumulation, bf16/f16/f32 out.
// Planned once for the shape (descriptors and the heuristic's algorithm), so run() only
// launches and can be captured in a CUDA graph. The unfused baseline and fallback of the
// tensor-parallel operations, and the reference the GEMM building block is measured against.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/gemm/gemm.h"

namespace tessera::gemm {

class BlasLtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  // Throws kUnsupported when cuBLASLt has no algorithm for the shape.
  explicit BlasLtGemm(const GemmShape& shape);
  ~BlasLtGemm();
  BlasLtGemm(const BlasLtGemm&) = delete;
  BlasLtGemm& operator=(const BlasLtGemm&) = delete;

  const GemmShape& shape() const { return shape_; }
  // `bias` is ignored without a planned bias; `workspace`: kWorkspaceBytes of device memory;
  // max_sms > 0: cuBLASLt's SM count target (0: the device's).
  void run(const void* a, const void* b, const void* bias, void* out, void* workspace,
           cudaStream_t stream, int max_sms = 0) const;

 private:
  GemmShape shape_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t weight_ = nullptr, input_ = nullptr, output_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  mutable int sm_target_ = 0;  // the SM count target op_ holds (0: the device's)
};

}  // namespace tessera::gemm
