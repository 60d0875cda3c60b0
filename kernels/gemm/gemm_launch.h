// The Hopper GEMM building block's host-facing side (no CUTLASS types): one problem, a kernel
// configuration, and a registry of launchers that the explicit instantiations in inst/ fill at
// load time.
//   d[M, N] = a[M, K] . b + bias[N]      a row-major; b [K, N] row-major, or [N, K] row-major
//                                         (a Linear's weight, weight_nk); d row-major;
//                                         f32 accumulation; bias optional (nullptr)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessera/gemm/gemm_config.h"

namespace tessera::gemm::kernels {

enum class ElementType : uint8_t { kBF16, kF16, kF32 };

// The CTAs of each kernel's cluster (gemm_sm90.cuh): the smallest grid a problem may ask for.
inline constexpr int kGemmClusterCtas = 2;

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;  // [N] of the output's type, or nullptr
  void* d = nullptr;
  int device_sms = 0;  // the device's multiprocessors (the persistent grid's size), at least
                       // kGemmClusterCtas
};

using tessera::gemm::GemmConfig;
using tessera::gemm::GemmSplit;
using tessera::gemm::GemmTile;

struct GemmKey {
  ElementType in = ElementType::kBF16;
  ElementType out = ElementType::kBF16;
  bool weight_nk = true;
  GemmTile tile = GemmTile::k128x256;
  // "" for production; tuning builds (-DTESSERA_GEMM_DEV_VARIANTS: inst/gemm_sm90_variants.cu)
  // register named alternatives of a tile that the TESSERA_GEMM_KERNEL parameter selects.
  std::string_view variant;
  bool operator==(const GemmKey&) const = default;
};

// cudaSuccess, or cudaErrorInvalidValue when the kernel cannot run the problem (alignment:
// K and N multiples of 8 for 16-bit types) or the workspace is smaller than workspace_bytes().
// Launching issues no allocation and no synchronization (CUDA-graph capturable).
struct GemmLauncher {
  cudaError_t (*launch)(const GemmProblem& problem, const GemmConfig& config, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) = nullptr;
  size_t (*workspace_bytes)(const GemmProblem& problem, const GemmConfig& config) = nullptr;
  explicit operator bool() const { return launch != nullptr; }
};

bool register_gemm_kernel(GemmKey key, GemmLauncher launcher);
// An empty launcher when this build has no instantiation for the key
// (TESSERA_KERNEL_FILTER/EXCLUDE).
GemmLauncher find_gemm_kernel(GemmKey key);

}  // namespace tessera::gemm::kernels
