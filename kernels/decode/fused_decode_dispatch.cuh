// Launches the fused decode kernel and the head sum for one element type: picks the kernel
// of the group size and batch tile, sizes its shared memory for the cluster's hidden slice.
// Included by one instantiation file per element type (inst/).
#pragma once

#include <cuda_runtime.h>

#include "decode/cluster_launch.cuh"
#include "decode/decode_sm90.cuh"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels::sm90 {

template <typename T, int kGroup, int kNT>
void* kernel_address() {
  return reinterpret_cast<void*>(&fused_decode_kernel<T, kGroup, kNT>);
}

// The kernel for (group, batch): batch tiles of 8 (kNT 1) or 16 (kNT 2), fused_decode_batch_tile.
template <typename T>
void* select_kernel(int group, int batch) {
  const bool wide = fused_decode_batch_tile(group, batch) == 16;
  switch (group) {
    case 1: return wide ? kernel_address<T, 1, 2>() : kernel_address<T, 1, 1>();
    case 2: return wide ? kernel_address<T, 2, 2>() : kernel_address<T, 2, 1>();
    case 4: return wide ? kernel_address<T, 4, 2>() : kernel_address<T, 4, 1>();
    case 8: return kernel_address<T, 8, 1>();
    default: return nullptr;
  }
}

template <typename T>
int max_active_clusters(int group, int batch, int hidden, int cluster_size) {
  void* kernel = select_kernel<T>(group, batch);
  const int smem = fused_decode_smem_bytes(group, batch, hidden, cluster_size);
  if (kernel == nullptr || smem > kMaxSmemBytes) return 0;
  return max_active_clusters_of(kernel, kThreads, smem, cluster_size);
}

template <typename T>
void launch(const FusedDecodeParams& p, cudaStream_t stream) {
  void* kernel = select_kernel<T>(p.group, p.batch);
  TESSERA_CHECK(kernel != nullptr, ErrorCode::kUnsupported, "fused decode: group size ", p.group,
                " has no kernel (1, 2, 4 or 8)");
  const int smem = fused_decode_smem_bytes(p.group, p.batch, p.hidden, p.cluster_size);
  TESSERA_CHECK(smem <= kMaxSmemBytes, ErrorCode::kUnsupported, "fused decode: cluster_size = ",
                p.cluster_size, " leaves a hidden slice whose kernel needs ", smem,
                " bytes of shared memory (at most ", kMaxSmemBytes, "): use a larger cluster");
  prepare_cluster_kernel(kernel, smem, p.cluster_size);
  const int tile = fused_decode_batch_tile(p.group, p.batch);
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config = cluster_config(p.cluster_size, p.num_kv_heads,
                                             (p.batch + tile - 1) / tile, kThreads, smem, stream, &attr);
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
