// RMSNorm and LayerNorm over rows with the fused residual add (ops.h):
//   h = round(x + residual) (written to residual_out) or x
//   RMSNorm:   out = h * rsqrt(mean(h^2) + eps) * weight
//   LayerNorm: out = (h - mean(h)) * rsqrt(mean((h - mean)^2) + eps) * weight + bias
// One CTA of 256 threads per row (grid-stride over rows); thread t takes features t, t + 256,
// ... in every pass, so it reads back only the h values it wrote itself. LayerNorm takes two
// passes over h for the variance (no cancellation for rows with a large mean). Sums in float32
// in a fixed order: results do not vary from run to run.
// Rows of 2-byte elements, a multiple of 8 and at most kVec8MaxCols wide, 16-byte aligned (every
// Llama and DiT width): each row has kLanes threads, and lane t keeps features
// [8 (t + i kLanes), + 8) in registers, so x, residual and weight are read once and residual_out
// and out written once, 16 bytes a time. Wide rows take a whole CTA each (kLanes =
// kBlockThreads); rows of at most 1024 features take a power of two of lanes of one warp, several
// rows a CTA (per-head q/k norms: a CTA for 64 features left 248 of its 256 threads idle and
// paid two barriers a row).
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

// The sum of `v` over a row's kLanes threads, every one of them getting the same bits (a
// butterfly adds the same pairs in every lane). Every thread of the CTA calls it.
template <int kLanes>
__device__ inline float row_sum(float v, float* scratch) {
  if constexpr (kLanes == kBlockThreads) {
    return block_sum(v, scratch);
  } else {
    static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0);
    for (int offset = kLanes / 2; offset > 0; offset /= 2)
      v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
  }
}

template <typename T, int kLanes, int kVecs>
__global__ void __launch_bounds__(kBlockThreads) norm_vec8_kernel(NormParams p) {
  __shared__ float scratch[kBlockThreads / 32];
  static_assert(kVecs >= 1 && kVecs <= kVec8MaxVecs);
  constexpr int kRowsPerBlock = kBlockThreads / kLanes;
  const int vecs = int(p.cols / 8);
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  const int lane = int(threadIdx.x) % kLanes;
  // The loop runs alike in every thread of the CTA (row_sum's shuffles and barriers); a thread
  // past the last row computes on nothing and stores nothing.
  for (int64_t first = int64_t(blockIdx.x) * kRowsPerBlock; first < p.rows;
       first += int64_t(gridDim.x) * kRowsPerBlock) {
    const int64_t mine = first + int(threadIdx.x) / kLanes;
    const int row_vecs = mine < p.rows ? vecs : 0;
    const int64_t row = mine < p.rows ? mine : p.rows - 1;  // addresses stay inside the tensor
    const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
    // Every load of the row (x, residual, weight, bias) is issued before the first store:
    // residual_out may alias x or residual, so a store between them would order the next loads
    // after it (one memory round trip per vector instead of one per row; at one decode row the
    // norm is a chain of round trips).
    float h[kVecs][8], r[kVecs][8], w[kVecs][8], b[kVecs][8];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int v = lane + i * kLanes;
      if (v >= row_vecs) break;
      load8(x + 8 * v, h[i]);
      if (p.residual != nullptr)
        load8(static_cast<const T*>(p.residual) + row * p.residual_stride + 8 * v, r[i]);
      if (weight != nullptr) load8(weight + 8 * v, w[i]);
      if (bias != nullptr) load8(bias + 8 * v, b[i]);
    }
    float sum = 0, sum_sq = 0;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int v = lane + i * kLanes;
      if (v >= row_vecs) break;
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
      mean = row_sum<kLanes>(sum, scratch) / n;
      float dev = 0;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        if (lane + i * kLanes >= row_vecs) break;
#pragma unroll
        for (int e = 0; e < 8; ++e) dev += (h[i][e] - mean) * (h[i][e] - mean);
      }
      inv = 1.0f / sqrtf(row_sum<kLanes>(dev, scratch) / n + p.eps);
    } else {
      inv = 1.0f / sqrtf(row_sum<kLanes>(sum_sq, scratch) / n + p.eps);
    }
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int v = lane + i * kLanes;
      if (v >= row_vecs) break;
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        y[e] = (h[i][e] - mean) * inv;
        if (weight != nullptr) y[e] *= w[i][e];
        if (bias != nullptr) y[e] += b[i][e];
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

template <int kLanes, int kVecs>
void launch_norm_vec8(const NormParams& p, cudaStream_t stream) {
  const dim3 grid(grid_blocks(p.rows, kBlockThreads / kLanes)), block(kBlockThreads);
  if (p.element == Element::kBF16)
    norm_vec8_kernel<__nv_bfloat16, kLanes, kVecs><<<grid, block, 0, stream>>>(p);
  else
    norm_vec8_kernel<__half, kLanes, kVecs><<<grid, block, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_norm(const NormParams& p, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (vec8_applies(p)) {
    // Lanes a row: one per vector of 8 up to a warp, then the whole CTA; vectors a lane: as few
    // as hold the row (registers for four would halve the CTAs a multiprocessor keeps).
    const int64_t vecs = p.cols / 8;
    if (vecs <= 4) return launch_norm_vec8<4, 1>(p, stream);
    if (vecs <= 8) return launch_norm_vec8<8, 1>(p, stream);
    if (vecs <= 16) return launch_norm_vec8<16, 1>(p, stream);
    if (vecs <= 32) return launch_norm_vec8<32, 1>(p, stream);
    if (vecs <= 64) return launch_norm_vec8<32, 2>(p, stream);
    if (vecs <= 128) return launch_norm_vec8<32, 4>(p, stream);
    if (vecs <= kBlockThreads) return launch_norm_vec8<kBlockThreads, 1>(p, stream);
    if (vecs <= 2 * kBlockThreads) return launch_norm_vec8<kBlockThreads, 2>(p, stream);
    return launch_norm_vec8<kBlockThreads, 4>(p, stream);
  }
  const dim3 grid(grid_blocks(p.rows, 1)), block(kBlockThreads);
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
