// RMSNorm and LayerNorm over rows with the fused residual add (ops.h):
//   h = round(x + residual) (written to residual_out) or x
//   RMSNorm:   out = h * rsqrt(mean(h^2) + eps) * weight
//   LayerNorm: out = (h - mean(h)) * rsqrt(mean((h - mean)^2) + eps) * weight + bias
// One CTA of 256 threads per row (grid-stride over rows); thread t takes features t, t + 256,
// ... in every pass, so it reads back only the h values it wrote itself. LayerNorm takes two
// passes over h for the variance (no cancellation for rows with a large mean). Sums in float32
// in a fixed order: results do not vary from run to run.
#include "ops/element.cuh"
#include "tessera/runtime/cuda_check.h"

namespace tessera::model::kernels {
namespace {

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) norm_kernel(NormParams p) {
  __shared__ float scratch[kBlockThreads / 32];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    T* out = static_cast<T*>(p.out) + row * p.out_stride;
    const T* h = x;  // where h is read back from
    float sum = 0, sum_sq = 0;
    if (p.residual != nullptr) {
      const T* r = static_cast<const T*>(p.residual) + row * p.residual_stride;
      T* r_out = static_cast<T*>(p.residual_out) + row * p.residual_out_stride;
      for (int64_t c = threadIdx.x; c < p.cols; c += kBlockThreads) {
        const T rounded = from_f32<T>(to_f32(x[c]) + to_f32(r[c]));
        r_out[c] = rounded;
        const float v = to_f32(rounded);
        sum += v;
        sum_sq += v * v;
      }
      h = r_out;
    } else {
      for (int64_t c = threadIdx.x; c < p.cols; c += kBlockThreads) {
        const float v = to_f32(x[c]);
        sum += v;
        sum_sq += v * v;
      }
    }
    const float n = float(p.cols);
    float mean = 0, inv;
    if (p.layer_norm) {
      mean = block_sum(sum, scratch) / n;
      float dev = 0;
      for (int64_t c = threadIdx.x; c < p.cols; c += kBlockThreads) {
        const float d = to_f32(h[c]) - mean;
        dev += d * d;
      }
      inv = 1.0f / sqrtf(block_sum(dev, scratch) / n + p.eps);
    } else {
      inv = 1.0f / sqrtf(block_sum(sum_sq, scratch) / n + p.eps);
    }
    const T* weight = static_cast<const T*>(p.weight);
    const T* bias = static_cast<const T*>(p.bias);
    for (int64_t c = threadIdx.x; c < p.cols; c += kBlockThreads) {
      float y = (to_f32(h[c]) - mean) * inv;
      if (weight != nullptr) y *= to_f32(weight[c]);
      if (bias != nullptr) y += to_f32(bias[c]);
      out[c] = from_f32<T>(y);
    }
  }
}

}  // namespace

void launch_norm(const NormParams& p, void* cuda_stream) {
  const dim3 grid(grid_blocks(p.rows, 1)), block(kBlockThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (p.element) {
    case Element::kF32:
      norm_kernel<float><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kBF16:
      norm_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kF16:
      norm_kernel<__half><<<grid, block, 0, stream>>>(p);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::model::kernels
