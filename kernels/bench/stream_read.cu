// The streaming read of stream_read.h: a grid-stride loop of 16-byte loads, four in flight per
// thread, folded into one value per block.
#include <cuda_runtime.h>

#include <cstdint>

#include "bench/stream_read.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::bench_kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;

__global__ void __launch_bounds__(kThreads) stream_read_kernel(const uint4* __restrict__ data,
                                                                size_t vectors, float* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    const uint4 a = data[i], b = data[i + stride], c = data[i + 2 * stride], d = data[i + 3 * stride];
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < vectors; i += stride) acc ^= data[i].x;
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (threadIdx.x == 0) sink[blockIdx.x] = __uint_as_float(acc);
}

}  // namespace

int stream_read_blocks() {
  int device = 0, sms = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms * kBlocksPerSm;
}

void launch_stream_read(const void* data, size_t bytes, float* sink, void* cuda_stream) {
  stream_read_kernel<<<stream_read_blocks(), kThreads, 0, static_cast<cudaStream_t>(cuda_stream)>>>(
      static_cast<const uint4*>(data), bytes / 16, sink);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::bench_kernels
