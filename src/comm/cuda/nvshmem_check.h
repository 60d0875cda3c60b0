// TESSERA_NVSHMEM_CHECK: turns a non-zero NVSHMEM status (the int its host setup functions
// return) into a tessera::Error (kNvshmem) naming the call and the file:line. NVSHMEM prints
// its own detail to stderr (NVSHMEM_DEBUG=WARN for more). The void on-stream functions report
// through CUDA errors and NVSHMEM's own abort, so they are not wrapped.
// Included only by CUDA sources.
#pragma once

#include "tessera/core/error.h"

#define TESSERA_NVSHMEM_CHECK(expr)                                                          \
  do {                                                                                       \
    int tessera_nvshmem_status_ = (expr);                                                    \
    if (tessera_nvshmem_status_ != 0)                                                        \
      ::tessera::throw_error(                                                                \
          ::tessera::ErrorCode::kNvshmem,                                                    \
          ::tessera::str(#expr, " failed at ", __FILE__, ":", __LINE__, ": status ",         \
                         tessera_nvshmem_status_, " (set NVSHMEM_DEBUG=WARN for details)")); \
  } while (0)
