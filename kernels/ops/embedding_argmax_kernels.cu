// Embedding lookup and greedy argmax (ops.h).
//
// embedding: one thread per output element (grid-stride over tokens * cols) copies the bits
// of table[ids[n], c] (or, for scatter_rows, the other way); an id outside [0, vocab) traps
// with a printf naming it.
// argmax: one CTA per row (grid-stride); thread t scans v = t, t + 1024, ... (eight loads in
// flight) keeping the best (value, index); a shared-memory tree then merges pairs with the same
// order, so the winner is the lowest index of the largest value (NaN above every number),
// independent of the split.
#include <cstdio>

#include "ops/element.cuh"
#include "tessera/runtime/cuda_check.h"

namespace tessera::model::kernels {
namespace {

template <typename Bits>
__global__ void __launch_bounds__(kBlockThreads) embedding_kernel(EmbeddingParams p) {
  const int64_t total = p.tokens * p.cols;
  for (int64_t i = int64_t{blockIdx.x} * kBlockThreads + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kBlockThreads) {
    const int64_t n = i / p.cols, c = i % p.cols;
    const int64_t id = load_index(p.ids, p.id_type, n * p.id_stride);
    if (id < 0 || id >= p.vocab) {
      printf("tessera %s: block %d: ids[%lld] = %lld is outside [0, %lld)\n",
             p.scatter ? "scatter_rows" : "embedding", int(blockIdx.x), static_cast<long long>(n), static_cast<long long>(id),
             static_cast<long long>(p.vocab));
      __trap();
    }
    Bits* row = static_cast<Bits*>(p.table) + id * p.table_stride + c;
    Bits* token = static_cast<Bits*>(p.out) + n * p.out_stride + c;
    if (p.scatter)
      *row = *token;
    else
      *token = *row;
  }
}

// Whether (a, ia) comes before (b, ib): the larger value (NaN largest), then the lower index.
__device__ inline bool better(float a, int64_t ia, float b, int64_t ib) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a != b) return a > b;
  return ia < ib;
}

// 1024 threads a row: a vocabulary of 128k is 125 loads a thread, not 500 (decode's single
// row is one CTA, and its scan is latency-bound).
constexpr int kArgmaxThreads = 1024;

template <typename T>
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(ArgmaxParams p) {
  __shared__ float best_value[kArgmaxThreads];
  __shared__ int64_t best_index[kArgmaxThreads];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* logits = static_cast<const T*>(p.logits) + row * p.logits_stride;
    float value = -__builtin_huge_valf();
    int64_t index = INT64_MAX;  // loses every tie against a real index
    // Eight loads in flight a thread, then the comparisons in index order (the same winner as
    // one at a time: 21 us for a 128256-wide row on an H200 with one load in flight).
    constexpr int kInFlight = 8;
    int64_t v = threadIdx.x;
    for (; v + (kInFlight - 1) * kArgmaxThreads < p.vocab; v += kInFlight * kArgmaxThreads) {
      float x[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) x[u] = to_f32(logits[v + u * kArgmaxThreads]);
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        if (better(x[u], v + u * kArgmaxThreads, value, index)) {
          value = x[u];
          index = v + u * kArgmaxThreads;
        }
      }
    }
    for (; v < p.vocab; v += kArgmaxThreads) {
      const float x = to_f32(logits[v]);
      if (better(x, v, value, index)) {
        value = x;
        index = v;
      }
    }
    __syncthreads();  // the previous row's readers are done
    best_value[threadIdx.x] = value;
    best_index[threadIdx.x] = index;
    __syncthreads();
    for (int stride = kArgmaxThreads / 2; stride > 0; stride /= 2) {
      if (int(threadIdx.x) < stride) {
        const int other = int(threadIdx.x) + stride;
        if (better(best_value[other], best_index[other], best_value[threadIdx.x],
                   best_index[threadIdx.x])) {
          best_value[threadIdx.x] = best_value[other];
          best_index[threadIdx.x] = best_index[other];
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (p.out_type == IndexType::kI64)
        static_cast<int64_t*>(p.out)[row * p.out_stride] = best_index[0];
      else
        static_cast<int32_t*>(p.out)[row * p.out_stride] = int32_t(best_index[0]);
    }
  }
}

}  // namespace

void launch_embedding(const EmbeddingParams& p, void* cuda_stream) {
  const dim3 grid(grid_blocks(p.tokens * p.cols, kBlockThreads)), block(kBlockThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (p.element_bytes == 4)
    embedding_kernel<uint32_t><<<grid, block, 0, stream>>>(p);
  else
    embedding_kernel<uint16_t><<<grid, block, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_argmax(const ArgmaxParams& p, void* cuda_stream) {
  const dim3 grid(grid_blocks(p.rows, 1)), block(kArgmaxThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (p.element) {
    case Element::kF32:
      argmax_kernel<float><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kBF16:
      argmax_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kF16:
      argmax_kernel<__half><<<grid, block, 0, stream>>>(p);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::model::kernels
