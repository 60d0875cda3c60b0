// Flux's q/k normalization and rotation (ops.h, head_rms_norm_rotary): a warp per (token, head)
// row, grid-stride over the rows; lane l takes the pairs l, l + 32, ... of the row. Pass one sums
// the squares (a warp reduction in a fixed order, so the result does not depend on scheduling);
// pass two re-reads the lane's pairs, normalizes, rotates and stores them. Every pair is read
// and written by one lane, after the reduction, so out may be x.
#include "ops/element.cuh"
#include "tessera/runtime/cuda_check.h"

namespace tessera::model::kernels {
namespace {

constexpr int kWarpsPerBlock = kBlockThreads / 32;

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) head_norm_rotary_kernel(HeadNormRotaryParams p) {
  const int lane = int(threadIdx.x % 32);
  const int64_t pairs = p.dim / 2;
  const T* weight = static_cast<const T*>(p.weight);
  for (int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
       row < p.tokens * p.heads; row += int64_t(gridDim.x) * kWarpsPerBlock) {
    const int64_t t = row / p.heads, h = row - t * p.heads;
    const T* x = static_cast<const T*>(p.x) + t * p.x_stride_token + h * p.x_stride_head;
    T* out = static_cast<T*>(p.out) + t * p.out_stride_token + h * p.out_stride_head;
    float sum_sq = 0;
    for (int64_t j = lane; j < pairs; j += 32) {
      const float a = to_f32(x[2 * j]), b = to_f32(x[2 * j + 1]);
      sum_sq += a * a + b * b;
    }
    for (int offset = 16; offset > 0; offset /= 2)
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    const float inv_rms = 1.0f / sqrtf(sum_sq / float(p.dim) + p.eps);
    for (int64_t j = lane; j < pairs; j += 32) {
      float a = to_f32(x[2 * j]) * inv_rms * to_f32(weight[2 * j]);
      float b = to_f32(x[2 * j + 1]) * inv_rms * to_f32(weight[2 * j + 1]);
      if (p.cos != nullptr) {
        const float* c = p.cos + t * p.cos_stride + 2 * j;
        const float* s = p.sin + t * p.sin_stride + 2 * j;
        const float ra = a * c[0] - b * s[0], rb = b * c[1] + a * s[1];
        a = ra;
        b = rb;
      }
      out[2 * j] = from_f32<T>(a);
      out[2 * j + 1] = from_f32<T>(b);
    }
  }
}

}  // namespace

void launch_head_norm_rotary(const HeadNormRotaryParams& p, void* cuda_stream) {
  const dim3 grid(grid_blocks(p.tokens * p.heads, kWarpsPerBlock)), block(kBlockThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (p.element) {
    case Element::kF32:
      head_norm_rotary_kernel<float><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kBF16:
      head_norm_rotary_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kF16:
      head_norm_rotary_kernel<__half><<<grid, block, 0, stream>>>(p);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::model::kernels
