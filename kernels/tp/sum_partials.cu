// GEMM+ReduceScatter's ordered sum of partials (sum_partials_launch.h): grid-stride over the
// output elements, each summed over the sources in order in float32.
#include <cuda_runtime.h>

#include <algorithm>

#include "ops/element.cuh"
#include "tessera/runtime/cuda_check.h"
#include "tp/sum_partials_launch.h"

namespace tessera::tp::kernels {

namespace {

using model::kernels::from_f32;
using model::kernels::to_f32;

template <typename T>
__global__ void sum_partials_kernel(SumPartialsParams p) {
  const T* partials = static_cast<const T*>(p.partials);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out);
  const int64_t n = p.rows * p.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int s = 0; s < p.sources; ++s) sum += to_f32(partials[s * p.block_stride + i]);
    if (bias != nullptr) sum += to_f32(bias[i % p.cols]);
    out[i] = from_f32<T>(sum);
  }
}

}  // namespace

void launch_sum_partials(const SumPartialsParams& p, void* cuda_stream) {
  const int64_t n = p.rows * p.cols;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 8));
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (p.element) {
    case model::kernels::Element::kF32:
      sum_partials_kernel<float><<<blocks, kThreads, 0, stream>>>(p);
      break;
    case model::kernels::Element::kBF16:
      sum_partials_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p);
      break;
    case model::kernels::Element::kF16:
      sum_partials_kernel<__half><<<blocks, kThreads, 0, stream>>>(p);
      break;
  }
}

void preload_sum_partials() {
  cudaFuncAttributes attributes;
  TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sum_partials_kernel<float>));
  TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sum_partials_kernel<__nv_bfloat16>));
  TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sum_partials_kernel<__half>));
}

}  // namespace tessera::tp::kernels
