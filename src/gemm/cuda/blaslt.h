// cuBLASLt: the process's handle and the one check for its status codes, shared by every
// user (decode's GEMVs, the tensor-parallel unfused pairs, the GEMM benchmarks).
#pragma once

#include <cublasLt.h>

#include "tessera/core/error.h"

#define TESSERA_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                    \
    cublasStatus_t tessera_status_ = (expr);                                              \
    if (tessera_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::tessera::throw_error(::tessera::ErrorCode::kCuda,                                 \
                             ::tessera::str(#expr, " failed at ", __FILE__, ":", __LINE__, \
                                            ": cuBLAS status ", int(tessera_status_)));   \
  } while (0)

namespace tessera::gemm {

// Created on first use, never destroyed (handles outliving static destruction order is what
// cuBLAS asks for).
cublasLtHandle_t blaslt_handle();

}  // namespace tessera::gemm
