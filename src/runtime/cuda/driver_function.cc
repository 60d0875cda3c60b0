#include "runtime/cuda/driver_function.h"

#include <cuda_runtime.h>

#include "tessera/core/error.h"

namespace tessera {

void* driver_entry_point(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  TESSERA_CHECK(e == cudaSuccess && found == cudaDriverEntryPointSuccess && p != nullptr,
                ErrorCode::kCuda, name, " not found in the CUDA driver");
  return p;
}

}  // namespace tessera
