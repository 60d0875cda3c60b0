// BlasLtLinear (blaslt_linear.h). Row-major y[B, N] = x W^T is column-major y^T[N, B] =
// W_c^T x_c, with W_c the column-major [K, N] view of W and x_c the [K, B] view of x.
#include "decode/cuda/blaslt_linear.h"

#include "gemm/cuda/blaslt.h"
#include "tessera/core/error.h"

namespace tessera::decode::detail {

BlasLtLinear::BlasLtLinear(cublasLtHandle_t handle, DType dtype, int64_t n, int64_t k,
                           int64_t max_batch)
    : handle_(handle) {
  const cudaDataType_t type = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none));
  cublasLtMatmulPreference_t pref = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  per_batch_.resize(max_batch);
  for (int64_t b = 1; b <= max_batch; ++b) {
    PerBatch& p = per_batch_[b - 1];
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.w, type, k, n, k));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.x, type, k, b, k));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.y, type, n, b, n));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, op_, p.w, p.x, p.y, p.y, pref, 1,
                                                        &result, &found));
    TESSERA_CHECK(found > 0, ErrorCode::kUnsupported, "cuBLASLt has no algorithm for [", b, ", ",
                  k, "] x [", n, ", ", k, "]^T");
    p.algo = result.algo;
  }
  cublasLtMatmulPreferenceDestroy(pref);
}

BlasLtLinear::~BlasLtLinear() {
  for (PerBatch& p : per_batch_) {
    cublasLtMatrixLayoutDestroy(p.w);
    cublasLtMatrixLayoutDestroy(p.x);
    cublasLtMatrixLayoutDestroy(p.y);
  }
  cublasLtMatmulDescDestroy(op_);
}

void BlasLtLinear::run(const void* x, const void* w, void* y, int64_t batch, void* workspace,
                       cudaStream_t stream) const {
  const PerBatch& p = per_batch_.at(batch - 1);
  const float alpha = 1.f, beta = 0.f;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(handle_, op_, &alpha, w, p.w, x, p.x, &beta, y, p.y, y, p.y,
                                      &p.algo, workspace, kWorkspaceBytes, stream));
}

}  // namespace tessera::decode::detail
