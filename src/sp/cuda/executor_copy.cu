// The strided copy kernel of the sequence-parallel executor: packs and unpacks regions of
// slots (head subsets of [B, rows, heads, D] planes are not contiguous) and copies between
// local and peer memory. The host normalizes the copy to up to 4 outer dims of contiguous rows
// (executor_copy.cc); here each row is copied with the widest vector (16, 8, 4, 2 or 1 bytes)
// that divides the row length, both base addresses and every stride.
//
// Mapping: a row gets `threads_per_row` threads (a power of two >= its vector count, at most
// the block), a block covers 256 / threads_per_row rows, blocks stride over the rows. No
// allocation, no synchronization: capturable in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>

#include "../executor_copy.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::sp::detail {

namespace {

constexpr int kThreads = 256;

struct alignas(16) Vec16 {
  uint4 v;
};

template <typename T>
__global__ void strided_copy_kernel(StridedCopyDesc d, int64_t rows, int64_t vecs_per_row,
                                    int threads_per_row) {
  const int rows_per_block = kThreads / threads_per_row;
  const int lane = threadIdx.x % threads_per_row;
  const int slot = threadIdx.x / threads_per_row;
  const auto* src = static_cast<const char*>(d.src);
  auto* dst = static_cast<char*>(d.dst);
  for (int64_t row = int64_t(blockIdx.x) * rows_per_block + slot; row < rows;
       row += int64_t(gridDim.x) * rows_per_block) {
    int64_t rest = row;
    const int64_t i3 = rest % d.shape[3];
    rest /= d.shape[3];
    const int64_t i2 = rest % d.shape[2];
    rest /= d.shape[2];
    const int64_t i1 = rest % d.shape[1];
    const int64_t i0 = rest / d.shape[1];
    const T* s = reinterpret_cast<const T*>(src + i0 * d.src_stride[0] + i1 * d.src_stride[1] +
                                            i2 * d.src_stride[2] + i3 * d.src_stride[3]);
    T* t = reinterpret_cast<T*>(dst + i0 * d.dst_stride[0] + i1 * d.dst_stride[1] +
                                i2 * d.dst_stride[2] + i3 * d.dst_stride[3]);
    for (int64_t v = lane; v < vecs_per_row; v += threads_per_row) t[v] = s[v];
  }
}

// The widest power-of-two width (<= 16) dividing every address and stride of the copy.
int vector_width(const StridedCopyDesc& d) {
  uint64_t bits = uint64_t(d.row_bytes) | reinterpret_cast<uintptr_t>(d.src) |
                  reinterpret_cast<uintptr_t>(d.dst);
  for (int k = 0; k < 4; ++k) {
    if (d.shape[k] > 1) bits |= uint64_t(d.src_stride[k]) | uint64_t(d.dst_stride[k]);
  }
  for (int w : {16, 8, 4, 2}) {
    if (bits % uint64_t(w) == 0) return w;
  }
  return 1;
}

template <typename T>
void launch(const StridedCopyDesc& d, int width, cudaStream_t stream) {
  const int64_t rows = d.shape[0] * d.shape[1] * d.shape[2] * d.shape[3];
  const int64_t vecs = d.row_bytes / width;
  int threads_per_row = 1;
  while (threads_per_row < kThreads && threads_per_row < vecs) threads_per_row *= 2;
  const int rows_per_block = kThreads / threads_per_row;
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > 65535 * 8) blocks = 65535 * 8;  // blocks stride over the rest
  strided_copy_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(d, rows, vecs, threads_per_row);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cuda_copy_strided(const StridedCopyDesc& desc, void* cuda_stream) {
  const int64_t rows = desc.shape[0] * desc.shape[1] * desc.shape[2] * desc.shape[3];
  if (rows == 0 || desc.row_bytes == 0) return;
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (vector_width(desc)) {
    case 16:
      launch<Vec16>(desc, 16, stream);
      break;
    case 8:
      launch<uint2>(desc, 8, stream);
      break;
    case 4:
      launch<uint32_t>(desc, 4, stream);
      break;
    case 2:
      launch<uint16_t>(desc, 2, stream);
      break;
    default:
      launch<uint8_t>(desc, 1, stream);
      break;
  }
}

}  // namespace tessera::sp::detail
