// RoPE in rotate-half form (ops.h): for the (token t, head h) row and pair i < R/2,
//   angle = float(pos[t]) * inv_freq[i]   (float32 product; sincosf, the accurate one, since
//                                          angles reach 1e5 radians at long contexts)
//   out[i] = x[i] cos - x[i + R/2] sin,   out[i + R/2] = x[i + R/2] cos + x[i] sin
// and out[d] = x[d] for d in [R, D) (skipped in place). grid (tokens, slices of the token's
// (head, pair) items): a decode step's one token spreads over as many CTAs as it has slices
// of kBlockThreads items, with 32-bit index math; each thread reads its pair before writing
// it, so out may be x. A position outside [0, 2^31) traps.
#include <algorithm>
#include <cstdio>

#include "ops/element.cuh"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::model::kernels {
namespace {

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) rope_kernel(RopeParams p) {
  const bool in_place = p.out == p.x && p.out_stride_token == p.x_stride_token &&
                        p.out_stride_head == p.x_stride_head;
  const int pass_through = in_place ? 0 : int(p.dim - 2 * p.half);
  const int per_head = int(p.half) + pass_through, work = int(p.heads) * per_head;
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const int64_t pos = load_index(p.positions, p.position_type, t * p.position_stride);
    if (pos < 0 || pos >= (int64_t{1} << 31)) {
      printf("tessera rope: block %d: positions[%lld] = %lld is outside [0, 2^31)\n",
             int(blockIdx.x), static_cast<long long>(t), static_cast<long long>(pos));
      __trap();
    }
    for (int i = int(blockIdx.y * kBlockThreads + threadIdx.x); i < work;
         i += int(gridDim.y) * kBlockThreads) {
      const int h = i / per_head, j = i % per_head;
      const T* x = static_cast<const T*>(p.x) + t * p.x_stride_token + h * p.x_stride_head;
      T* out = static_cast<T*>(p.out) + t * p.out_stride_token + h * p.out_stride_head;
      if (j < p.half) {
        const float angle = float(pos) * p.inv_freq[j * p.inv_freq_stride];
        float s, c;
        sincosf(angle, &s, &c);
        const float a = to_f32(x[j]), b = to_f32(x[j + p.half]);
        out[j] = from_f32<T>(a * c - b * s);
        out[j + p.half] = from_f32<T>(b * c + a * s);
      } else {
        const int64_t d = 2 * p.half + (j - int(p.half));
        out[d] = x[d];
      }
    }
  }
}

}  // namespace

void launch_rope(const RopeParams& p, void* cuda_stream) {
  // Items per token: heads x (pairs + pass-through dims), at most heads x dim.
  const int64_t items = p.heads * p.dim;
  TESSERA_CHECK_ARG(items < (int64_t{1} << 31), "rope: heads x dim = ", items,
                    ": expected below 2^31");
  const int64_t slices = std::max<int64_t>(1, (items + kBlockThreads - 1) / kBlockThreads);
  const dim3 grid(grid_blocks(p.tokens, 1), unsigned(std::min<int64_t>(slices, 65535))),
      block(kBlockThreads);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (p.element) {
    case Element::kF32:
      rope_kernel<float><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kBF16:
      rope_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
      break;
    case Element::kF16:
      rope_kernel<__half><<<grid, block, 0, stream>>>(p);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::model::kernels
