#include <cuda_runtime.h>

#include "tessera/runtime/cuda_check.h"

namespace tessera {

void cuda_copy_bytes(void* dst, const void* src, size_t bytes, void* stream) {
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

void cuda_fill_bytes(void* dst, int value, size_t bytes, void* stream) {
  TESSERA_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
}

}  // namespace tessera
