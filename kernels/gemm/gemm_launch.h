// The Hopper GEMM building block's host-facing side (no CUTLASS types): one problem, and a
// registry of launchers that the explicit instantiations in inst/ fill at load time.
//   d[M, N] = a[M, K] . b + bias[N]      a row-major; b [K, N] row-major, or [N, K] row-major
//                                         (a Linear's weight, weight_nk); d row-major;
//                                         f32 accumulation; bias optional (nullptr)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::gemm::kernels {

enum class ElementType : uint8_t { kBF16, kF16, kF32 };

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;  // [N] of the output's type, or nullptr
  void* d = nullptr;
  int device_sms = 0;  // the device's multiprocessors (the persistent grid's size)
};

struct GemmKey {
  ElementType in = ElementType::kBF16;
  ElementType out = ElementType::kBF16;
  bool weight_nk = true;
  bool operator==(const GemmKey&) const = default;
};

// cudaSuccess, or cudaErrorInvalidValue when the kernel cannot run the problem (alignment:
// K and N multiples of 8 for 16-bit types) or the workspace is too small.
using GemmLaunchFn = cudaError_t (*)(const GemmProblem& problem, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream);

bool register_gemm_kernel(GemmKey key, GemmLaunchFn launch);
// nullptr when this build has no instantiation for the key (TESSERA_KERNEL_FILTER/EXCLUDE).
GemmLaunchFn find_gemm_kernel(GemmKey key);

// Workspace every launcher fits in (the persistent scheduler's and the epilogue's).
constexpr size_t kGemmWorkspaceBytes = size_t(4) << 20;

}  // namespace tessera::gemm::kernels
