#include "comm/cuda/stream_write.h"

#include <cuda.h>

#include "tessera/core/error.h"

namespace tessera::cuda_comm {

namespace {

using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

// Found at run time: the runtime library links no libcuda.
WriteValue64 driver_write_value64() {
  static const WriteValue64 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &p, 12000,
                                                           cudaEnableDefault, &found);
    TESSERA_CHECK(e == cudaSuccess && found == cudaDriverEntryPointSuccess && p != nullptr,
                  ErrorCode::kCuda, "cuStreamWriteValue64 not found in the CUDA driver");
    return reinterpret_cast<WriteValue64>(p);
  }();
  return fn;
}

}  // namespace

void stream_write_value64(cudaStream_t stream, uint64_t* address, uint64_t value,
                          const char* what) {
  const CUresult e = driver_write_value64()(reinterpret_cast<CUstream>(stream),
                                            reinterpret_cast<CUdeviceptr>(address), value, 0);
  TESSERA_CHECK(e == CUDA_SUCCESS, ErrorCode::kCuda, what, ": cuStreamWriteValue64 failed (CUresult ",
                int(e), ")");
}

}  // namespace tessera::cuda_comm
