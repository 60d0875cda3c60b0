// V's transposed copy for the FP8 attention kernel (attention_launch.h): FP8 WGMMA takes its B
// operand K-major only, and the PV product's K is the key, so the kernel reads V as [D, keys]
// with keys contiguous, in the slot order fp8_pv_key_of_slot gives. One block turns a tile of
// 128 keys of one (b, h) around through shared memory: 16-byte loads along D, 4-byte stores
// along the keys. Memory-bound (V's bytes twice), about 1% of the attention it feeds at L 16k.
#include <cuda_runtime.h>

#include <cstdint>

#include "attn/attention_launch.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::attn::kernels {

namespace {

constexpr int kTileKeys = 128;
constexpr int kThreads = 256;

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    fp8_transpose_v_kernel(const uint8_t* __restrict__ v, int64_t len, int64_t stride_b,
                           int64_t stride_l, int64_t stride_h, uint8_t* __restrict__ vt,
                           int64_t vt_len) {
  // Row stride D + 16 bytes: keeps 16-byte loads aligned and spreads a column's bytes over banks.
  constexpr int kRow = kHeadDim + 16;
  __shared__ alignas(16) uint8_t tile[kTileKeys * kRow];
  const int64_t key0 = int64_t(blockIdx.x) * kTileKeys;
  const int64_t h = blockIdx.y, b = blockIdx.z;
  constexpr int kChunks = kHeadDim / 16;  // 16-byte pieces of a key's row
  for (int i = threadIdx.x; i < kTileKeys * kChunks; i += kThreads) {
    const int key = i / kChunks, chunk = i % kChunks;
    uint4 x = make_uint4(0, 0, 0, 0);  // keys past L: zeros (P is 0 there; 0 * NaN would not be)
    if (key0 + key < len)
      x = *reinterpret_cast<const uint4*>(v + b * stride_b + (key0 + key) * stride_l +
                                          h * stride_h + chunk * 16);
    *reinterpret_cast<uint4*>(tile + key * kRow + chunk * 16) = x;
  }
  __syncthreads();
  // Word w of row d holds slots 4w..4w+3 of the tile: keys 32 (w / 8) + fp8_pv_key_of_slot(...).
  uint8_t* out = vt + ((b * gridDim.y + h) * kHeadDim) * vt_len + key0;
  constexpr int kWords = kTileKeys / 4;
  for (int i = threadIdx.x; i < kHeadDim * kWords; i += kThreads) {
    const int d = i / kWords, w = i % kWords;
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int slot = 4 * w + j;
      const int key = 32 * (slot / 32) + fp8_pv_key_of_slot(slot % 32);
      word |= uint32_t(tile[key * kRow + d]) << (8 * j);
    }
    *reinterpret_cast<uint32_t*>(out + int64_t(d) * vt_len + 4 * w) = word;
  }
}

}  // namespace

void launch_fp8_transpose_v(const Bshd& v, int64_t batch, int64_t heads, int head_dim, void* vt,
                            void* cuda_stream) {
  const int64_t vt_len = fp8_vt_len(v.len);
  if (batch == 0 || heads == 0 || vt_len == 0) return;
  TESSERA_CHECK(heads <= 65535 && batch <= 65535, ErrorCode::kUnsupported,
                "fp8 attention: ", batch, " x ", heads, " (batch x heads): expected each <= 65535");
  const dim3 grid(unsigned(vt_len / kTileKeys), unsigned(heads), unsigned(batch));
  auto* stream = static_cast<cudaStream_t>(cuda_stream);
  const auto* src = static_cast<const uint8_t*>(v.data);
  auto* dst = static_cast<uint8_t*>(vt);
  switch (head_dim) {
    case 128:
      fp8_transpose_v_kernel<128><<<grid, kThreads, 0, stream>>>(src, v.len, v.stride_b, v.stride_l,
                                                                 v.stride_h, dst, vt_len);
      break;
    case 256:
      fp8_transpose_v_kernel<256><<<grid, kThreads, 0, stream>>>(src, v.len, v.stride_b, v.stride_l,
                                                                 v.stride_h, dst, vt_len);
      break;
    default:
      throw_error(ErrorCode::kInternal, str("fp8 transpose: head dim ", head_dim));
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::attn::kernels
