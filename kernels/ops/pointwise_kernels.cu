// The elementwise layer operations (ops.h): a CTA per (row, 256 columns) (grid-stride), a
// thread per element, float32 arithmetic, one rounding:
//   silu_and_mul:   out = a / (1 + exp(-a)) * b
//   gelu_tanh:      out = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
//   adaln_modulate: out = a (1 + c) + b      (b, c broadcast over rows: stride_row 0)
// expf and tanhf are the accurate versions (no fast-math): the cpu reference is the test.
#include "ops/element.cuh"
#include "tessera/runtime/cuda_check.h"

namespace tessera::model::kernels {
namespace {

template <typename T>
__device__ inline float operand(const Operand& o, int64_t b, int64_t r, int64_t c) {
  return to_f32(static_cast<const T*>(o.data)[b * o.stride_batch + r * o.stride_row + c]);
}

template <typename T, PointwiseOp kOp>
__device__ inline void pointwise_element(const PointwiseParams& p, int64_t b, int64_t r,
                                         int64_t c) {
  const float a = operand<T>(p.a, b, r, c);
  float y;
  if constexpr (kOp == PointwiseOp::kSiluAndMul) {
    y = a / (1.0f + expf(-a)) * operand<T>(p.b, b, r, c);
  } else if constexpr (kOp == PointwiseOp::kGeluTanh) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    y = 0.5f * a * (1.0f + tanhf(kSqrt2OverPi * (a + 0.044715f * a * a * a)));
  } else {
    y = a * (1.0f + operand<T>(p.c, b, r, c)) + operand<T>(p.b, b, r, c);
  }
  static_cast<T*>(p.out)[b * p.out_stride_batch + r * p.out_stride_row + c] = from_f32<T>(y);
}

template <typename T, PointwiseOp kOp>
__global__ void __launch_bounds__(kBlockThreads) pointwise_kernel(PointwiseParams p) {
  // Work items are (row, tile of kBlockThreads columns): the index math is per CTA, not per
  // element, and a single wide row (decode) still spreads over many CTAs.
  const int64_t tiles = (p.cols + kBlockThreads - 1) / kBlockThreads;
  for (int64_t item = blockIdx.x; item < p.batch * p.rows * tiles; item += gridDim.x) {
    const int64_t row = item / tiles, c = (item % tiles) * kBlockThreads + threadIdx.x;
    if (c < p.cols) pointwise_element<T, kOp>(p, row / p.rows, row % p.rows, c);
  }
}

template <typename T>
void launch_typed(const PointwiseParams& p, cudaStream_t stream) {
  const int64_t tiles = (p.cols + kBlockThreads - 1) / kBlockThreads;
  const dim3 grid(grid_blocks(p.batch * p.rows * tiles, 1)), block(kBlockThreads);
  switch (p.op) {
    case PointwiseOp::kSiluAndMul:
      pointwise_kernel<T, PointwiseOp::kSiluAndMul><<<grid, block, 0, stream>>>(p);
      break;
    case PointwiseOp::kGeluTanh:
      pointwise_kernel<T, PointwiseOp::kGeluTanh><<<grid, block, 0, stream>>>(p);
      break;
    case PointwiseOp::kAdalnModulate:
      pointwise_kernel<T, PointwiseOp::kAdalnModulate><<<grid, block, 0, stream>>>(p);
      break;
  }
}

}  // namespace

void launch_pointwise(const PointwiseParams& p, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (p.element) {
    case Element::kF32:
      launch_typed<float>(p, stream);
      break;
    case Element::kBF16:
      launch_typed<__nv_bfloat16>(p, stream);
      break;
    case Element::kF16:
      launch_typed<__half>(p, stream);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::model::kernels
