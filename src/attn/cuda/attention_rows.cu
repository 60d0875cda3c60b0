// Row kernels of the attention state: merge of (O, lse) partials (finalize is a merge of one
// partial), and init_state. One warp per row (b, l, h); lanes stride over D.
//   m = max_k lse_k,  w_k = exp(lse_k - m),  O = sum_k w_k O_k / sum_k w_k,  lse = m + log sum_k
//   w_k
// all in fp32. Rows whose partials are all -inf get O = 0, lse = -inf. The output may alias a
// partial (each warp reads its whole row before writing it). Memory-bound; no tiling needed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attn/attention_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::attn::kernels {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

__device__ __forceinline__ float load_float(const RowTensor& t, int64_t offset) {
  switch (t.type) {
    case FloatType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(t.data)[offset]);
    case FloatType::kF16:
      return __half2float(static_cast<const __half*>(t.data)[offset]);
    default:
      return static_cast<const float*>(t.data)[offset];
  }
}

__device__ __forceinline__ void store_float(const RowTensor& t, int64_t offset, float value) {
  void* data = const_cast<void*>(t.data);
  switch (t.type) {
    case FloatType::kBF16:
      static_cast<__nv_bfloat16*>(data)[offset] = __float2bfloat16_rn(value);
      break;
    case FloatType::kF16:
      static_cast<__half*>(data)[offset] = __float2half_rn(value);
      break;
    default:
      static_cast<float*>(data)[offset] = value;
      break;
  }
}

__global__ void merge_rows_kernel(const __grid_constant__ MergeDesc desc) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= desc.batch * desc.len * desc.heads) return;
  const int64_t h = row % desc.heads;
  const int64_t l = (row / desc.heads) % desc.len;
  const int64_t b = row / (desc.heads * desc.len);
  float m = -INFINITY;
  for (int k = 0; k < desc.num_partials; ++k) {
    const LseTensor& s = desc.partial_lse[k];
    m = fmaxf(m, s.data[b * s.stride_b + h * s.stride_h + l * s.stride_l]);
  }
  float total = 0.0f;
  float weight[kMaxMergePartials];
  // Weights of this row; partial count is small (<= 64) so registers or local memory both do.
  for (int k = 0; k < desc.num_partials; ++k) {
    const LseTensor& s = desc.partial_lse[k];
    const float lse = s.data[b * s.stride_b + h * s.stride_h + l * s.stride_l];
    weight[k] = (m == -INFINITY || lse == -INFINITY) ? 0.0f : expf(lse - m);
    total += weight[k];
  }
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  const RowTensor& out = desc.out_o;
  const int64_t out_base = b * out.stride_b + l * out.stride_l + h * out.stride_h;
  // Every lane reads its elements of every partial before any lane writes (the output may be
  // a partial): gather into registers per D chunk of 32, then sync the warp, then write.
  for (int64_t d0 = 0; d0 < desc.head_dim; d0 += 32) {
    const int64_t d = d0 + lane;
    float acc = 0.0f;
    if (d < desc.head_dim) {
      for (int k = 0; k < desc.num_partials; ++k) {
        if (weight[k] == 0.0f) continue;
        const RowTensor& p = desc.partial_o[k];
        acc += weight[k] * load_float(p, b * p.stride_b + l * p.stride_l + h * p.stride_h + d);
      }
    }
    __syncwarp();
    if (d < desc.head_dim) store_float(out, out_base + d, acc * inv_total);
  }
  __syncwarp();  // every lane has read the partial lse values before one may be overwritten
  if (lane == 0 && desc.out_lse.data != nullptr) {
    const LseTensor& s = desc.out_lse;
    const_cast<float*>(s.data)[b * s.stride_b + h * s.stride_h + l * s.stride_l] =
        total > 0.0f ? m + logf(total) : -INFINITY;
  }
}

__global__ void init_state_kernel(RowTensor o, LseTensor lse, int64_t batch, int64_t len,
                                  int64_t heads, int64_t head_dim) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= batch * len * heads) return;
  const int64_t h = row % heads;
  const int64_t l = (row / heads) % len;
  const int64_t b = row / (heads * len);
  float* orow = const_cast<float*>(static_cast<const float*>(o.data)) + b * o.stride_b +
                l * o.stride_l + h * o.stride_h;
  for (int64_t d = lane; d < head_dim; d += 32) orow[d] = 0.0f;
  if (lane == 0)
    const_cast<float*>(lse.data)[b * lse.stride_b + h * lse.stride_h + l * lse.stride_l] =
        -INFINITY;
}

unsigned grid_for_rows(int64_t rows) {
  return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void launch_merge_rows(const MergeDesc& desc) {
  const int64_t rows = desc.batch * desc.len * desc.heads;
  if (rows == 0) return;
  merge_rows_kernel<<<grid_for_rows(rows), 32 * kRowsPerBlock, 0,
                      static_cast<cudaStream_t>(desc.cuda_stream)>>>(desc);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_init_state(const RowTensor& o, const LseTensor& lse, int64_t batch, int64_t len,
                       int64_t heads, int64_t head_dim, void* cuda_stream) {
  const int64_t rows = batch * len * heads;
  if (rows == 0) return;
  init_state_kernel<<<grid_for_rows(rows), 32 * kRowsPerBlock, 0,
                      static_cast<cudaStream_t>(cuda_stream)>>>(o, lse, batch, len, heads,
                                                                head_dim);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::attn::kernels
