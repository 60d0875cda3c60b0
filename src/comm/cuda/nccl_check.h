// TESSERA_NCCL_CHECK: turns a failed ncclResult_t into a tessera::Error (kNccl) naming the call,
// the file:line, NCCL's string for the code and NCCL's last error message (which says what
// went wrong, e.g. which transport failed). ncclInProgress counts as a failure here: code
// that drives non-blocking communicators handles it before checking (nccl_communicator.cc).
// Included only by CUDA sources.
#pragma once

#include <nccl.h>

#include "tessera/core/error.h"

namespace tessera::cuda_comm {

// "<ncclGetErrorString>: <ncclGetLastError>" (the last error is per thread; comm may be null).
inline std::string nccl_error_text(ncclResult_t result, ncclComm_t comm = nullptr) {
  const char* last = ncclGetLastError(comm);
  std::string text = ncclGetErrorString(result);
  if (last != nullptr && last[0] != '\0') text += str(" (", last, ")");
  return text;
}

}  // namespace tessera::cuda_comm

#define TESSERA_NCCL_CHECK(expr)                                                        \
  do {                                                                                  \
    ncclResult_t tessera_nccl_result_ = (expr);                                         \
    if (tessera_nccl_result_ != ncclSuccess)                                            \
      ::tessera::throw_error(                                                           \
          ::tessera::ErrorCode::kNccl,                                                  \
          ::tessera::str(#expr, " failed at ", __FILE__, ":", __LINE__, ": ",           \
                         ::tessera::cuda_comm::nccl_error_text(tessera_nccl_result_))); \
  } while (0)
