// The second kernel of the fused decode blocks: each cluster (a KV head's, or an MLA query
// head's) wrote its partial of the output projection; this adds them in a fixed order, so the
// output is bitwise the same from run to run (no atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cluster/cluster_collectives.cuh"

namespace tessera::decode::kernels::sm90 {

// out[b][i] = sum over parts c = 0, 1, ... of partial[c][b][i], in that order; elems (B x
// hidden) a multiple of 4. Launched as a programmatic dependent it waits for its producer.
template <typename T>
__global__ void __launch_bounds__(256) sum_heads_kernel(const float* __restrict__ partial,
                                                         T* __restrict__ out, int num_parts,
                                                         int64_t elems) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < elems;
       i += int64_t(gridDim.x) * blockDim.x * 4) {
    float4 acc = *reinterpret_cast<const float4*>(partial + i);
    for (int c = 1; c < num_parts; ++c) {
      const float4 v = *reinterpret_cast<const float4*>(partial + c * elems + i);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    out[i] = tessera::cluster::from_f32<T>(acc.x);
    out[i + 1] = tessera::cluster::from_f32<T>(acc.y);
    out[i + 2] = tessera::cluster::from_f32<T>(acc.z);
    out[i + 3] = tessera::cluster::from_f32<T>(acc.w);
  }
}

}  // namespace tessera::decode::kernels::sm90
