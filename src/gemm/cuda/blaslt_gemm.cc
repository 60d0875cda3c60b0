// BlasLtGemm (blaslt_gemm.h). cuBLASLt is column-major: row-major out[M, N] = a b is computed
// as out^T[N, M] = b^T a^T, where a^T is a's memory read as column-major [K, M] and b^T is b's
// memory read as column-major [N, K] ([K, N] storage, no transpose) or [K, N] transposed
// ([N, K] storage). The bias epilogue adds a vector along out^T's rows: bias[N].
#include "gemm/cuda/blaslt_gemm.h"

#include "gemm/cuda/blaslt.h"

namespace tessera::gemm {

namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kF32:
      return CUDA_R_32F;
    default:
      break;
  }
  throw_error(ErrorCode::kUnsupported,
              str("cuBLASLt GEMM of dtype ", dtype_name(dtype), ": expected bf16, f16 or f32"));
}

}  // namespace

BlasLtGemm::BlasLtGemm(const GemmShape& shape) : shape_(shape) {
  TESSERA_CHECK_ARG(shape.m >= 1 && shape.n >= 1 && shape.k >= 1, "GEMM shape M ", shape.m, " N ",
                    shape.n, " K ", shape.k, ": expected every size >= 1");
  const cudaDataType_t in = cuda_type(shape.dtype), out = cuda_type(shape.out_dtype);
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t weight_op = shape.weight_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t none = CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &weight_op,
                                                      sizeof weight_op));
  TESSERA_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none));
  if (shape.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &epilogue, sizeof epilogue));
  }
  const uint64_t m = uint64_t(shape.m), n = uint64_t(shape.n), k = uint64_t(shape.k);
  if (shape.weight_nk) {
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&weight_, in, k, n, int64_t(k)));
  } else {
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&weight_, in, n, k, int64_t(n)));
  }
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&input_, in, k, m, int64_t(k)));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&output_, out, n, m, int64_t(n)));
  cublasLtMatmulPreference_t pref = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      blaslt_handle(), op_, weight_, input_, output_, output_, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  TESSERA_CHECK(status == CUBLAS_STATUS_SUCCESS && found > 0, ErrorCode::kUnsupported,
                "cuBLASLt has no algorithm for M ", shape.m, " N ", shape.n, " K ", shape.k, " ",
                dtype_name(shape.dtype), " -> ", dtype_name(shape.out_dtype),
                shape.weight_nk ? " (weight [N, K])" : " (weight [K, N])");
  algo_ = result.algo;
}

BlasLtGemm::~BlasLtGemm() {
  cublasLtMatrixLayoutDestroy(weight_);
  cublasLtMatrixLayoutDestroy(input_);
  cublasLtMatrixLayoutDestroy(output_);
  cublasLtMatmulDescDestroy(op_);
}

void BlasLtGemm::run(const void* a, const void* b, const void* bias, void* out, void* workspace,
                     cudaStream_t stream, int max_sms) const {
  if (max_sms != sm_target_) {  // a host call per GEMM only when the share changes
    const int32_t target = max_sms;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                        &target, sizeof target));
    sm_target_ = max_sms;
  }
  if (shape_.bias) {
    TESSERA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  const float alpha = 1.f, beta = 0.f;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(blaslt_handle(), op_, &alpha, b, weight_, a, input_, &beta,
                                      out, output_, out, output_, &algo_, workspace,
                                      kWorkspaceBytes, stream));
}

}  // namespace tessera::gemm
