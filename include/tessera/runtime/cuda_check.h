// One checking macro per CUDA-side library: every return code is checked and turned into a
// tessera::Error naming the call, the file:line and the library's own error string.
// Included only by CUDA sources.
#pragma once

#include <cuda_runtime.h>

#include "tessera/core/error.h"

#define TESSERA_CUDA_CHECK(expr)                                                       \
  do {                                                                                 \
    cudaError_t tessera_err_ = (expr);                                                 \
    if (tessera_err_ != cudaSuccess)                                                   \
      ::tessera::throw_error(::tessera::ErrorCode::kCuda,                              \
                             ::tessera::str(#expr, " failed at ", __FILE__, ":", __LINE__, \
                                            ": ", cudaGetErrorString(tessera_err_)));  \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define TESSERA_CUDA_CHECK_LAUNCH() TESSERA_CUDA_CHECK(cudaGetLastError())
