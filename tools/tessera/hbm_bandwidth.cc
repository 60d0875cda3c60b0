#include "hbm_bandwidth.h"

#include <algorithm>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/memory.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>

#include "bench/stream_read.h"
#endif

namespace tessera::cli {

double measure_hbm_read_gbps(const Stream& stream) {
#ifdef TESSERA_WITH_CUDA
  const size_t bytes = size_t(4) << 30;
  const Device device = stream.device();
  Tensor buf = Tensor::empty({int64_t(bytes)}, DType::kU8, device);
  Tensor sink = Tensor::empty({bench_kernels::stream_read_blocks()}, DType::kF32, device);
  fill_bytes(buf.data(), 0x3c, bytes, stream);  // not zeros: the read must not be special
  auto s = static_cast<cudaStream_t>(stream.cuda_stream());
  auto read = [&] { bench_kernels::launch_stream_read(buf.data(), bytes, sink.data_as<float>(), s); };
  for (int i = 0; i < 3; ++i) read();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms(20);
  for (float& m : ms) {
    cudaEventRecord(a, s);
    read();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&m, a, b);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + 10, ms.end());
  return double(bytes) / (double(ms[10]) * 1e-3) * 1e-9;
#else
  (void)stream;
  throw_error(ErrorCode::kUnsupported, "the HBM bandwidth needs the cuda backend");
#endif
}

}  // namespace tessera::cli
