#include "comm/cuda/stream_memops.h"

#include <cuda.h>

#include "tessera/core/error.h"

namespace tessera::cuda_comm {

namespace {

using Value64Op = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

// Found at run time: the runtime library links no libcuda.
Value64Op driver_entry_point(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  TESSERA_CHECK(e == cudaSuccess && found == cudaDriverEntryPointSuccess && p != nullptr,
                ErrorCode::kCuda, name, " not found in the CUDA driver");
  return reinterpret_cast<Value64Op>(p);
}

}  // namespace

void stream_write_value64(cudaStream_t stream, uint64_t* address, uint64_t value,
                          const char* what) {
  static const Value64Op write = driver_entry_point("cuStreamWriteValue64");
  const CUresult e = write(reinterpret_cast<CUstream>(stream),
                           reinterpret_cast<CUdeviceptr>(address), value, 0);
  TESSERA_CHECK(e == CUDA_SUCCESS, ErrorCode::kCuda, what, ": cuStreamWriteValue64 failed (CUresult ",
                int(e), ")");
}

void stream_wait_value64_geq(cudaStream_t stream, const uint64_t* address, uint64_t value,
                             const char* what) {
  static const Value64Op wait = driver_entry_point("cuStreamWaitValue64");
  const CUresult e = wait(reinterpret_cast<CUstream>(stream),
                          reinterpret_cast<CUdeviceptr>(address), value, CU_STREAM_WAIT_VALUE_GEQ);
  TESSERA_CHECK(e == CUDA_SUCCESS, ErrorCode::kCuda, what, ": cuStreamWaitValue64 failed (CUresult ",
                int(e), ")");
}

}  // namespace tessera::cuda_comm
