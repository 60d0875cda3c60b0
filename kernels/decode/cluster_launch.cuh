// Launching a kernel of thread-block clusters, as both fused decode kernels do: the launch
// configuration (a cluster along x, `clusters` of them, batch tiles along y), the kernel's
// shared-memory opt-in (and the non-portable attribute above 8 CTAs), and how many clusters
// the device runs at once.
#pragma once

#include <cuda_runtime.h>

#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels {

inline cudaLaunchConfig_t cluster_config(int cluster_size, int clusters, int batch_tiles,
                                         int threads, int smem, cudaStream_t stream,
                                         cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(cluster_size * clusters), unsigned(batch_tiles));
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = size_t(smem);
  config.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = unsigned(cluster_size);
  attr->val.clusterDim.y = attr->val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

inline void prepare_cluster_kernel(void* kernel, int smem, int cluster_size) {
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (cluster_size > 8)
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
}

// Clusters of `cluster_size` the current device runs at once (0: it cannot launch them).
inline int max_active_clusters_of(void* kernel, int threads, int smem, int cluster_size) {
  prepare_cluster_kernel(kernel, smem, cluster_size);
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config = cluster_config(cluster_size, 1, 1, threads, smem, nullptr, &attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // an unlaunchable size reads as 0 clusters
    return 0;
  }
  return clusters;
}

}  // namespace tessera::decode::kernels
