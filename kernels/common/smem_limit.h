// A kernel's dynamic shared-memory limit raised once per device (host side of the launches that
// take more than the default 48 KB and run often: attention, split-KV decode).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "tessera/runtime/cuda_check.h"

namespace tessera::kernels {

// Raises `kernel`'s limit to `bytes` on the current device unless `raised` (a bit a device)
// says it was: the attribute is per (function, device), and a driver call on every launch costs
// host time on eager steps. One `raised` a kernel function. Returns the current device (which
// a launch often asks next).
template <typename Kernel>
int raise_smem_limit_once(Kernel kernel, int bytes, std::atomic<uint64_t>& raised) {
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t(1) << (device & 63);
  if ((raised.load(std::memory_order_acquire) & bit) != 0) return device;
  TESSERA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  raised.fetch_or(bit, std::memory_order_acq_rel);
  return device;
}

}  // namespace tessera::kernels
