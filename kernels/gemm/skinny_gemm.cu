// The skinny GEMM (skinny_gemm_launch.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm/skinny_gemm_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::gemm::kernels {
namespace {

constexpr int kWarps = 8;  // per CTA, splitting K between them
constexpr int kRows = 4;   // weight rows per CTA: 4 loads in flight per thread and chunk
constexpr int kThreads = kWarps * 32;

// A 16-byte weight chunk, streamed: not kept in L1 (the activations live there), read once.
__device__ inline uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ inline float2 pair_to_float2(uint32_t bits, __nv_bfloat16) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}
__device__ inline float2 pair_to_float2(uint32_t bits, __half) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

template <typename T>
__device__ inline float dot8(const uint4& w, const uint4& x, float acc) {
  const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = pair_to_float2(wv[i], T{}), b = pair_to_float2(xv[i], T{});
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

template <typename Out>
__device__ inline void store(void* d, int64_t i, float v);
template <>
__device__ inline void store<float>(void* d, int64_t i, float v) {
  static_cast<float*>(d)[i] = v;
}
template <>
__device__ inline void store<__nv_bfloat16>(void* d, int64_t i, float v) {
  static_cast<__nv_bfloat16*>(d)[i] = __float2bfloat16_rn(v);
}
template <>
__device__ inline void store<__half>(void* d, int64_t i, float v) {
  static_cast<__half*>(d)[i] = __float2half_rn(v);
}
__device__ inline float load_bias(const void* bias, int64_t i, float) {
  return static_cast<const float*>(bias)[i];
}
__device__ inline float load_bias(const void* bias, int64_t i, __nv_bfloat16) {
  return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[i]);
}
__device__ inline float load_bias(const void* bias, int64_t i, __half) {
  return __half2float(static_cast<const __half*>(bias)[i]);
}

template <typename T, typename Out, int kM>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(SkinnyGemmParams p) {
  __shared__ float partial[kWarps][kRows][kM];
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int64_t row0 = int64_t(blockIdx.x) * kRows;
  const int64_t chunks = p.k / 8;
  const uint4* a = static_cast<const uint4*>(p.a);
  const uint4* w[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    w[r] = static_cast<const uint4*>(p.b) + min(row0 + r, p.n - 1) * chunks;  // clamped: no OOB
  float acc[kRows][kM] = {};
  // Thread t takes chunks t, t + kThreads, ...: every row's loads of a step are issued before
  // any is used.
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r] = load_stream(w[r] + c);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= p.m) break;
      const uint4 x = a[m * chunks + c];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r][m] = dot8<T>(wv[r], x, acc[r][m]);
    }
  }
  // Lanes, then warps in order: a fixed tree, the same bits every run.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][r][m] = v;
    }
  }
  __syncthreads();
  const int r = int(threadIdx.x) / kM, m = int(threadIdx.x) % kM;
  if (r >= kRows || m >= p.m || row0 + r >= p.n) return;
  float v = 0;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) v += partial[i][r][m];
  if (p.bias != nullptr) v += load_bias(p.bias, row0 + r, Out{});
  store<Out>(p.d, m * p.n + row0 + r, v);
}

template <typename T, typename Out>
void launch_typed(const SkinnyGemmParams& p, cudaStream_t s) {
  const dim3 grid(unsigned((p.n + kRows - 1) / kRows)), block(kThreads);
  if (p.m == 1) skinny_gemm_kernel<T, Out, 1><<<grid, block, 0, s>>>(p);
  else if (p.m == 2) skinny_gemm_kernel<T, Out, 2><<<grid, block, 0, s>>>(p);
  else if (p.m <= 4) skinny_gemm_kernel<T, Out, 4><<<grid, block, 0, s>>>(p);
  else skinny_gemm_kernel<T, Out, 8><<<grid, block, 0, s>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_in(const SkinnyGemmParams& p, cudaStream_t s) {
  switch (p.out) {
    case ElementType::kF32: return launch_typed<T, float>(p, s);
    case ElementType::kF16: return launch_typed<T, __half>(p, s);
    default: return launch_typed<T, __nv_bfloat16>(p, s);
  }
}

}  // namespace

bool skinny_gemm_supported(ElementType in, int64_t m, int64_t k) {
  return in != ElementType::kF32 && m >= 1 && m <= kSkinnyMaxM && k % 8 == 0;
}

void launch_skinny_gemm(const SkinnyGemmParams& p, void* cuda_stream) {
  auto s = static_cast<cudaStream_t>(cuda_stream);
  if (p.in == ElementType::kF16) launch_in<__half>(p, s);
  else launch_in<__nv_bfloat16>(p, s);
}

}  // namespace tessera::gemm::kernels
