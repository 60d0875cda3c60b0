#include "gemm/cuda/blaslt.h"

namespace tessera::gemm {

cublasLtHandle_t blaslt_handle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    TESSERA_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }();
  return handle;
}

}  // namespace tessera::gemm
