// GEMM+ReduceScatter's last step on the owner: out = sum over sources, in source order 0, 1,
// ..., P-1 and in float32, of the partial blocks the sources stored into this rank's buffer,
// plus the bias once, rounded once to the output type. A fixed order: bitwise the same result
// every call.
#pragma once

#include <cstdint>

#include "ops/ops_launch.h"

namespace tessera::tp::kernels {

struct SumPartialsParams {
  model::kernels::Element element = model::kernels::Element::kBF16;  // partials, bias and out
  const void* partials = nullptr;  // [sources][block_stride] elements
  int sources = 1;
  int64_t block_stride = 0;   // elements between two sources' blocks
  int64_t rows = 0, cols = 0;  // this rank's output, rows x cols, contiguous in every block
  const void* bias = nullptr;  // [cols] or nullptr
  void* out = nullptr;         // [rows][cols]
};
void launch_sum_partials(const SumPartialsParams& p, void* cuda_stream);

// Loads the sum kernels' module now. Under CUDA's lazy loading (the default) a kernel's first
// launch loads its module, which waits for the device's running kernels; the sum's first launch
// comes after this rank's waits for its peers are enqueued, so it would block the host until
// those waits end, and with the peers' work enqueued by the same thread later (loopback ranks)
// never before they time out. Call when the operation is made.
void preload_sum_partials();

}  // namespace tessera::tp::kernels
