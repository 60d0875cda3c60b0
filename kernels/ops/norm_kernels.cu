// RMSNorm and LayerNorm over rows with the fused residual add (ops.h):
//   h = round(x + residual) (written to residual_out) or x
//   RMSNorm:   out = h * rsqrt(mean(h^2) + eps) * weight
//   LayerNorm: out = (h - mean(h)) * rsqrt(mean((h - mean)^2) + eps) * weight + bias
// One CTA of 256 threads per row (grid-stride over rows); thread t takes features t, t + 256,
// ... in every pass, so it reads back only the h values it wrote itself. LayerNorm takes two
// passes over h for the variance (no cancellation for rows with a large mean). Sums in float32
// in a fixed order: results do not vary from run to run.
// Rows of 2-byte elements, a multiple of 8 and at most kVec8MaxCols wide, 16-byte aligned (every
// Llama and DiT width): thread t keeps features [8 (t + i kBlockThreads), + 8) in registers, so
// x, residual and weight are read once and residual_out and out written once, 16 bytes a time.
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

constexpr int kVec8MaxVecs = 4;  // vectors of 8 per thread
constexpr int64_t kVec8MaxCols = int64_t{kVec8MaxVecs} * 8 * kBlockThreads;

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) norm_vec8_kernel(NormParams p) {
  __shared__ float scratch[kBlockThreads / 32];
  const int vecs = int(p.cols / 8);
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    // Every load of the row (x, residual, weight) is issued before the first store: residual_out
    // may alias x or residual, so a store between them would order the next loads after it (one
    // memory round trip per vector instead of one per row; at one decode row the norm is a
    // chain of round trips).
    float h[kVec8MaxVecs][8], r[kVec8MaxVecs][8], w[kVec8MaxVecs][8];
#pragma unroll
    for (int i = 0; i < kVec8MaxVecs; ++i) {
      const int v = int(threadIdx.x) + i * kBlockThreads;
      if (v >= vecs) break;
      load8(x + 8 * v, h[i]);
      if (p.residual != nullptr)
        load8(static_cast<const T*>(p.residual) + row * p.residual_stride + 8 * v, r[i]);
      if (weight != nullptr) load8(weight + 8 * v, w[i]);
    }
    float sum = 0, sum_sq = 0;
#pragma unroll
    for (int i = 0; i < kVec8MaxVecs; ++i) {
      const int v = int(threadIdx.x) + i * kBlockThreads;
      if (v >= vecs) break;
      if (p.residual != nullptr) {
#pragma unroll
        for (int e = 0; e < 8; ++e) h[i][e] = to_f32(from_f32<T>(h[i][e] + r[i][e]));  // rounded
        store8(static_cast<T*>(p.residual_out) + row * p.residual_out_stride + 8 * v, h[i]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        sum += h[i][e];
        sum_sq += h[i][e] * h[i][e];
      }
    }
    const float n = float(p.cols);
    float mean = 0, inv;
    if (p.layer_norm) {
      mean = block_sum(sum, scratch) / n;
      float dev = 0;
#pragma unroll
      for (int i = 0; i < kVec8MaxVecs; ++i) {
        if (int(threadIdx.x) + i * kBlockThreads >= vecs) break;
#pragma unroll
        for (int e = 0; e < 8; ++e) dev += (h[i][e] - mean) * (h[i][e] - mean);
      }
      inv = 1.0f / sqrtf(block_sum(dev, scratch) / n + p.eps);
    } else {
      inv = 1.0f / sqrtf(block_sum(sum_sq, scratch) / n + p.eps);
    }
#pragma unroll
    for (int i = 0; i < kVec8MaxVecs; ++i) {
      const int v = int(threadIdx.x) + i * kBlockThreads;
      if (v >= vecs) break;
      float b[8], y[8];
      if (bias != nullptr) load8(bias + 8 * v, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        y[e] = (h[i][e] - mean) * inv;
        if (weight != nullptr) y[e] *= w[i][e];
        if (bias != nullptr) y[e] += b[e];
      }
      store8(static_cast<T*>(p.out) + row * p.out_stride + 8 * v, y);
    }
  }
}

bool vec8_applies(const NormParams& p) {
  return p.element != Element::kF32 && p.cols > 0 && p.cols % 8 == 0 && p.cols <= kVec8MaxCols &&
         vec8_aligned(p.x, {p.x_stride}) && vec8_aligned(p.residual, {p.residual_stride}) &&
         vec8_aligned(p.residual_out, {p.residual_out_stride}) && vec8_aligned(p.weight, {}) &&
         vec8_aligned(p.bias, {}) && vec8_aligned(p.out, {p.out_stride});
}

}  // namespace

void launch_norm(const NormParams& p, void* cuda_stream) {
  const dim3 grid(grid_blocks(p.rows, 1)), block(kBlockThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (vec8_applies(p)) {
    if (p.element == Element::kBF16)
      norm_vec8_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
    else
      norm_vec8_kernel<__half><<<grid, block, 0, stream>>>(p);
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
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
