// Launches the fused decode kernel and the head sum for one element type: picks the kernel
// of the group size and batch tile, sets its shared memory and cluster attributes once.
// Included by one instantiation file per element type (inst/).
#pragma once

#include <cuda_runtime.h>

#include "decode/decode_sm90.cuh"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels::sm90 {

template <typename T, int kGroup, int kNTiles>
void* kernel_address() {
  return reinterpret_cast<void*>(&fused_decode_kernel<T, kGroup, kNTiles>);
}

// The kernel for (group, batch): batch tiles of 8 for batches up to 8 (and group 8), else 16.
template <typename T>
void* select_kernel(int group, int batch, int& smem_bytes, int& batch_tile) {
  batch_tile = fused_decode_batch_tile(group, batch);
  const bool wide = batch_tile == 16;
#define TESSERA_DECODE_CASE(G)                                                    \
  if (group == G) {                                                               \
    if (wide) {                                                                   \
      smem_bytes = DecodeTraits<T, G, 2>::kSmemBytes;                             \
      return kernel_address<T, G, 2>();                                           \
    }                                                                             \
    smem_bytes = DecodeTraits<T, G, 1>::kSmemBytes;                               \
    return kernel_address<T, G, 1>();                                             \
  }
  TESSERA_DECODE_CASE(1)
  TESSERA_DECODE_CASE(2)
  TESSERA_DECODE_CASE(4)
#undef TESSERA_DECODE_CASE
  if (group == 8) {
    smem_bytes = DecodeTraits<T, 8, 1>::kSmemBytes;
    return kernel_address<T, 8, 1>();
  }
  return nullptr;
}

inline cudaLaunchConfig_t cluster_config(int cluster_size, int clusters, int batch_tiles,
                                         int smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(cluster_size * clusters, batch_tiles);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cluster_size;
  attr->val.clusterDim.y = attr->val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

template <typename T>
void prepare_kernel(void* kernel, int smem, int cluster_size) {
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (cluster_size > 8)
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
}

template <typename T>
int max_active_clusters(int group, int batch, int cluster_size) {
  int smem = 0, tile = 0;
  void* kernel = select_kernel<T>(group, batch, smem, tile);
  if (kernel == nullptr) return 0;
  prepare_kernel<T>(kernel, smem, cluster_size);
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config = cluster_config(cluster_size, 1, 1, smem, nullptr, &attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // an unlaunchable size reads as 0 clusters
    return 0;
  }
  return clusters;
}

template <typename T>
void launch(const FusedDecodeParams& p, cudaStream_t stream) {
  int smem = 0, tile = 0;
  void* kernel = select_kernel<T>(p.group, p.batch, smem, tile);
  TESSERA_CHECK(kernel != nullptr, ErrorCode::kUnsupported, "fused decode: group size ", p.group,
                " has no kernel (1, 2, 4 or 8)");
  prepare_kernel<T>(kernel, smem, p.cluster_size);
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config = cluster_config(p.cluster_size, p.num_kv_heads,
                                             (p.batch + tile - 1) / tile, smem, stream, &attr);
  void* args[] = {const_cast<FusedDecodeParams*>(&p)};
  TESSERA_CUDA_CHECK(cudaLaunchKernelExC(&config, kernel, args));

  // The head sum: launched as a programmatic dependent, it starts while the fused kernel
  // runs and waits (griddepcontrol.wait) for its completion.
  const int64_t elems = int64_t(p.batch) * p.hidden;
  cudaLaunchConfig_t sum_config{};
  sum_config.gridDim = dim3(unsigned(std::min<int64_t>((elems / 4 + 255) / 256, 264)));
  sum_config.blockDim = dim3(256);
  sum_config.stream = stream;
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  sum_config.attrs = &pdl;
  sum_config.numAttrs = 1;
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&sum_config, sum_heads_kernel<T>,
                                        static_cast<const float*>(p.partial), static_cast<T*>(p.out),
                                        p.num_kv_heads, elems));
}

}  // namespace tessera::decode::kernels::sm90
