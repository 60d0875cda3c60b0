#include "comm/cuda/stream_memops.h"

#include <cuda.h>

#include "runtime/cuda/driver_function.h"
#include "tessera/core/error.h"

namespace tessera::cuda_comm {

namespace {

using Value64Op = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

}  // namespace

void stream_write_value64(cudaStream_t stream, uint64_t* address, uint64_t value,
                          const char* what) {
  static const Value64Op write = driver_function<Value64Op>("cuStreamWriteValue64");
  const CUresult e = write(reinterpret_cast<CUstream>(stream),
                           reinterpret_cast<CUdeviceptr>(address), value, 0);
  TESSERA_CHECK(e == CUDA_SUCCESS, ErrorCode::kCuda, what, ": cuStreamWriteValue64 failed (CUresult ",
                int(e), ")");
}

void stream_wait_value64_geq(cudaStream_t stream, const uint64_t* address, uint64_t value,
                             const char* what) {
  static const Value64Op wait = driver_function<Value64Op>("cuStreamWaitValue64");
  const CUresult e = wait(reinterpret_cast<CUstream>(stream),
                          reinterpret_cast<CUdeviceptr>(address), value, CU_STREAM_WAIT_VALUE_GEQ);
  TESSERA_CHECK(e == CUDA_SUCCESS, ErrorCode::kCuda, what, ": cuStreamWaitValue64 failed (CUresult ",
                int(e), ")");
}

}  // namespace tessera::cuda_comm
