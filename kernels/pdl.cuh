// Programmatic dependent launch (Hopper): a kernel launched through launch_dependent() may be
// scheduled while the kernel before it on the stream is still finishing, so its CTAs are
// resident (and may issue work that needs nothing from that kernel, e.g. loads of weights) when
// the previous kernel's last CTA ends, instead of after a launch gap. Between the many small
// kernels of a decode step, those gaps are a visible share of the step.
//
// The contract, for every kernel launched this way: call wait_for_prior_grid() before reading
// or writing anything the previous kernels on the stream touch (it returns once the previous
// grid has completed and its writes are visible; without the launch attribute it returns at
// once). allow_next_grid() lets the following kernel be scheduled early; calling it at the top
// is always safe, since that kernel waits in turn. Captured into a CUDA graph, the stream order
// becomes a programmatic edge. TESSERA_PDL=0 launches plainly (the A/B switch).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace tessera::kernels {

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Both, at the top of a kernel that needs what the previous kernels wrote before anything else.
__device__ __forceinline__ void enter_dependent_grid() {
  allow_next_grid();
  wait_for_prior_grid();
}

// Whether launch_dependent() sets the attribute: TESSERA_PDL (default on) on a device of compute
// capability 9.0 or newer (kernels/pdl.cu).
bool pdl_enabled();

template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace tessera::kernels
