// The elementwise layer operations (ops.h): a CTA per (row, 256 columns) (grid-stride), a
// thread per element, float32 arithmetic, one rounding:
//   silu_and_mul:   out = a / (1 + exp(-a)) * b
//   gelu_tanh:      out = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
//   adaln_modulate: out = a (1 + c) + b      (b, c broadcast over rows: stride_row 0)
//   gated_add:      out = a + c b            (c broadcast over rows)
//   silu:           out = a / (1 + exp(-a))
// expf and tanhf are the accurate versions (no fast-math): the cpu reference is the test.
// Where every operand allows it (2-byte elements, columns a multiple of 8, 16-byte aligned
// rows) a thread takes eight consecutive columns through 16-byte loads and stores instead, the
// index math once per row: the same arithmetic per element, so the same bits.
#include "ops/element.cuh"
#include "tessera/runtime/cuda_check.h"

namespace tessera::model::kernels {
namespace {

template <typename T>
__device__ inline float operand(const Operand& o, int64_t b, int64_t r, int64_t c) {
  return to_f32(static_cast<const T*>(o.data)[b * o.stride_batch + r * o.stride_row + c]);
}

// One element's value from its operands (b and c unused where the op has none).
template <PointwiseOp kOp>
__device__ inline float pointwise_value(float a, float b, float c) {
  if constexpr (kOp == PointwiseOp::kSiluAndMul) {
    return a / (1.0f + expf(-a)) * b;
  } else if constexpr (kOp == PointwiseOp::kGeluTanh) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * a * (1.0f + tanhf(kSqrt2OverPi * (a + 0.044715f * a * a * a)));
  } else if constexpr (kOp == PointwiseOp::kAdalnModulate) {
    return a * (1.0f + c) + b;
  } else if constexpr (kOp == PointwiseOp::kGatedAdd) {
    return a + c * b;
  } else {
    return a / (1.0f + expf(-a));
  }
}

template <PointwiseOp kOp>
constexpr bool uses_b = kOp != PointwiseOp::kGeluTanh && kOp != PointwiseOp::kSilu;
template <PointwiseOp kOp>
constexpr bool uses_c = kOp == PointwiseOp::kAdalnModulate || kOp == PointwiseOp::kGatedAdd;

template <typename T, PointwiseOp kOp>
__device__ inline void pointwise_element(const PointwiseParams& p, int64_t b, int64_t r,
                                         int64_t c) {
  const float a = operand<T>(p.a, b, r, c);
  const float x = uses_b<kOp> ? operand<T>(p.b, b, r, c) : 0.f;
  const float z = uses_c<kOp> ? operand<T>(p.c, b, r, c) : 0.f;
  static_cast<T*>(p.out)[b * p.out_stride_batch + r * p.out_stride_row + c] =
      from_f32<T>(pointwise_value<kOp>(a, x, z));
}

template <typename T>
__device__ inline const T* operand_row(const Operand& o, int64_t b, int64_t r) {
  return static_cast<const T*>(o.data) + b * o.stride_batch + r * o.stride_row;
}

// grid (column tiles of kBlockThreads x 8, rows): thread t of tile x takes columns
// [8 (x kBlockThreads + t), + 8) of every row blockIdx.y, blockIdx.y + gridDim.y, ...
template <typename T, PointwiseOp kOp>
__global__ void __launch_bounds__(kBlockThreads) pointwise_vec8_kernel(PointwiseParams p) {
  const int64_t c = (int64_t(blockIdx.x) * kBlockThreads + threadIdx.x) * 8;
  if (c >= p.cols) return;
  for (int64_t row = blockIdx.y; row < p.batch * p.rows; row += gridDim.y) {
    const int64_t b = row / p.rows, r = row - b * p.rows;
    float a[8], x[8] = {}, z[8] = {}, y[8];
    load8(operand_row<T>(p.a, b, r) + c, a);
    if constexpr (uses_b<kOp>) load8(operand_row<T>(p.b, b, r) + c, x);
    if constexpr (uses_c<kOp>) load8(operand_row<T>(p.c, b, r) + c, z);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = pointwise_value<kOp>(a[i], x[i], z[i]);
    store8(static_cast<T*>(p.out) + b * p.out_stride_batch + r * p.out_stride_row + c, y);
  }
}

bool vec8_applies(const PointwiseParams& p) {
  if (p.element == Element::kF32 || p.cols <= 0 || p.cols % 8 != 0 || p.batch * p.rows <= 0)
    return false;
  const bool b = p.op != PointwiseOp::kGeluTanh && p.op != PointwiseOp::kSilu;
  const bool c = p.op == PointwiseOp::kAdalnModulate || p.op == PointwiseOp::kGatedAdd;
  return vec8_aligned(p.a.data, {p.a.stride_batch, p.a.stride_row}) &&
         (!b || vec8_aligned(p.b.data, {p.b.stride_batch, p.b.stride_row})) &&
         (!c || vec8_aligned(p.c.data, {p.c.stride_batch, p.c.stride_row})) &&
         vec8_aligned(p.out, {p.out_stride_batch, p.out_stride_row});
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

template <typename T, PointwiseOp kOp>
void launch_vec8(const PointwiseParams& p, cudaStream_t stream) {
  const int64_t tiles = (p.cols / 8 + kBlockThreads - 1) / kBlockThreads;
  const int64_t rows = p.batch * p.rows;
  const dim3 grid(unsigned(tiles), unsigned(rows < 65535 ? rows : 65535));
  pointwise_vec8_kernel<T, kOp><<<grid, kBlockThreads, 0, stream>>>(p);
}

template <typename T, PointwiseOp kOp>
void launch_op(const PointwiseParams& p, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2) {
    if (vec8_applies(p)) return launch_vec8<T, kOp>(p, stream);
  }
  const int64_t tiles = (p.cols + kBlockThreads - 1) / kBlockThreads;
  const dim3 grid(grid_blocks(p.batch * p.rows * tiles, 1)), block(kBlockThreads);
  pointwise_kernel<T, kOp><<<grid, block, 0, stream>>>(p);
}

template <typename T>
void launch_typed(const PointwiseParams& p, cudaStream_t stream) {
  switch (p.op) {
    case PointwiseOp::kSiluAndMul:
      return launch_op<T, PointwiseOp::kSiluAndMul>(p, stream);
    case PointwiseOp::kGeluTanh:
      return launch_op<T, PointwiseOp::kGeluTanh>(p, stream);
    case PointwiseOp::kAdalnModulate:
      return launch_op<T, PointwiseOp::kAdalnModulate>(p, stream);
    case PointwiseOp::kGatedAdd:
      return launch_op<T, PointwiseOp::kGatedAdd>(p, stream);
    case PointwiseOp::kSilu:
      return launch_op<T, PointwiseOp::kSilu>(p, stream);
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
