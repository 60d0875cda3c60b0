// The plain-C++ description of the layer-operation kernels (include/tessera/model/ops.h states
// what each computes), shared by the host glue (src/model/cuda/ops_cuda.cc, host compiler) and
// the kernels (kernels/ops/*.cu, nvcc). Strides are in elements; the innermost (feature)
// dimension of every tensor is contiguous.
#pragma once

#include <cstdint>

namespace tessera::model::kernels {

enum class Element : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
enum class IndexType : int { kI32 = 0, kI64 = 1 };

// One row per CTA (grid-stride over rows), 256 threads striding over the C features.
struct NormParams {
  Element element = Element::kBF16;
  bool layer_norm = false;  // false: RMSNorm
  int64_t rows = 0, cols = 0;
  const void* x = nullptr;
  int64_t x_stride = 0;
  const void* residual = nullptr;  // nullptr: no fused residual add
  int64_t residual_stride = 0;
  void* residual_out = nullptr;
  int64_t residual_out_stride = 0;
  const void* weight = nullptr;  // [C] or nullptr (LayerNorm without affine)
  const void* bias = nullptr;    // [C] or nullptr
  float eps = 1e-6f;
  void* out = nullptr;
  int64_t out_stride = 0;
};
void launch_norm(const NormParams& p, void* cuda_stream);

// One (token, head) row per CTA (grid-stride), threads over the rotated pairs and the
// pass-through dims.
struct RopeParams {
  Element element = Element::kBF16;
  int64_t tokens = 0, heads = 0, dim = 0, half = 0;  // half = R / 2 rotated pairs
  const void* x = nullptr;
  int64_t x_stride_token = 0, x_stride_head = 0;
  void* out = nullptr;
  int64_t out_stride_token = 0, out_stride_head = 0;
  const void* positions = nullptr;
  IndexType position_type = IndexType::kI32;
  int64_t position_stride = 1;
  const float* inv_freq = nullptr;
  int64_t inv_freq_stride = 1;
};
void launch_rope(const RopeParams& p, void* cuda_stream);

// Elementwise over [batch, rows, cols] (2-D operations have batch 1), one thread per element
// (grid-stride). An operand's element (b, r, c) is at data + b * stride_batch + r * stride_row
// + c; stride_row 0 broadcasts it over the rows (adaLN's shift and scale over the tokens).
enum class PointwiseOp : int {
  kSiluAndMul = 0,     // out = silu(a) * b
  kGeluTanh = 1,       // out = gelu_tanh(a)
  kAdalnModulate = 2,  // out = a * (1 + c) + b   (b: shift, c: scale)
  kGatedAdd = 3,       // out = a + c * b         (c: gate)
  kSilu = 4,           // out = silu(a)
};
struct Operand {
  const void* data = nullptr;
  int64_t stride_batch = 0, stride_row = 0;
};
struct PointwiseParams {
  Element element = Element::kBF16;
  PointwiseOp op = PointwiseOp::kGeluTanh;
  int64_t batch = 1, rows = 0, cols = 0;
  Operand a, b, c;
  void* out = nullptr;
  int64_t out_stride_batch = 0, out_stride_row = 0;
};
void launch_pointwise(const PointwiseParams& p, void* cuda_stream);

// A warp per (token, head) row (grid-stride), two passes over the row's pairs: the sum of
// squares, then the normalized and rotated pairs (each lane reads its pairs before writing
// them, so out may be x).
struct HeadNormRotaryParams {
  Element element = Element::kBF16;
  int64_t tokens = 0, heads = 0, dim = 0;
  const void* x = nullptr;
  int64_t x_stride_token = 0, x_stride_head = 0;
  void* out = nullptr;
  int64_t out_stride_token = 0, out_stride_head = 0;
  const void* weight = nullptr;  // [dim], x's element type
  float eps = 1e-6f;
  const float* cos = nullptr;  // [tokens, dim] or nullptr (no rotation)
  const float* sin = nullptr;
  int64_t cos_stride = 0, sin_stride = 0;  // row strides
};
void launch_head_norm_rotary(const HeadNormRotaryParams& p, void* cuda_stream);

// out[n, :] = table[ids[n], :], one thread per element (grid-stride); an id outside [0, vocab)
// traps naming it.
// Also embedding's inverse (scatter_rows): with `scatter`, table[ids[n], :] = out[n, :].
struct EmbeddingParams {
  int element_bytes = 2;
  bool scatter = false;
  int64_t tokens = 0, cols = 0, vocab = 0;
  const void* ids = nullptr;
  IndexType id_type = IndexType::kI32;
  int64_t id_stride = 1;
  void* table = nullptr;
  int64_t table_stride = 0;
  void* out = nullptr;  // with `scatter`, the rows written into the table
  int64_t out_stride = 0;
};
void launch_embedding(const EmbeddingParams& p, void* cuda_stream);

// One row per CTA (grid-stride), 1024 threads: each scans a strided part of the vocabulary,
// then a shared-memory tree picks the best (value, index) pair (NaN largest, lowest index among
// equals), so the result does not depend on the thread count.
struct ArgmaxParams {
  Element element = Element::kBF16;
  int64_t rows = 0, vocab = 0;
  const void* logits = nullptr;
  int64_t logits_stride = 0;
  void* out = nullptr;
  IndexType out_type = IndexType::kI64;
  int64_t out_stride = 1;
};
void launch_argmax(const ArgmaxParams& p, void* cuda_stream);

}  // namespace tessera::model::kernels
