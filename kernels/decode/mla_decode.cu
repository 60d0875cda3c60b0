// The fused MLA decode launch entry points (mla_launch.h): the kernel of mla_sm90.cuh for bf16
// and f16, a cluster of cluster_size CTAs per query head, then the head sum (sum_heads.cuh).
#include <cuda_runtime.h>

#include <algorithm>

#include "decode/cluster_launch.cuh"
#include "decode/mla_launch.h"
#include "decode/mla_sm90.cuh"
#include "decode/sum_heads.cuh"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels {
namespace {

template <typename T>
void* kernel_address() {
  return reinterpret_cast<void*>(&mla::mla_decode_kernel<T>);
}

void* select_kernel(Element element) {
  return element == Element::kBF16 ? kernel_address<__nv_bfloat16>() : kernel_address<__half>();
}

// Both element types are 2 bytes.
int smem_bytes(int hidden, int rank, int nope, int rope, int v_dim) {
  return mla_smem_layout(hidden, rank, nope, rope, v_dim, 2).total;
}

template <typename T>
void launch_typed(const MlaDecodeParams& p, cudaStream_t stream) {
  void* kernel = kernel_address<T>();
  const int smem = smem_bytes(p.hidden, p.rank, p.nope, p.rope, p.v_dim);
  prepare_cluster_kernel(kernel, smem, p.cluster_size);
  cudaLaunchAttribute attr{};
  const int tiles = (p.batch + kMlaBatchTile - 1) / kMlaBatchTile;
  cudaLaunchConfig_t config =
      cluster_config(p.cluster_size, p.num_heads, tiles, kMlaThreads, smem, stream, &attr);
  void* args[] = {const_cast<MlaDecodeParams*>(&p)};
  TESSERA_CUDA_CHECK(cudaLaunchKernelExC(&config, kernel, args));
  const int64_t elems = int64_t(p.batch) * p.hidden;
  const unsigned blocks = unsigned(std::min<int64_t>((elems / 4 + 255) / 256, 264));
  sm90::sum_heads_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<const float*>(p.partial),
                                                        static_cast<T*>(p.out), p.num_heads, elems);
}

}  // namespace

const char* mla_decode_unsupported(int hidden, int rank, int nope, int rope, int v_dim) {
  if (hidden % kMlaHiddenAlign != 0) return "hidden: the fused MLA kernel needs a multiple of 256";
  if (rope > kMlaMaxRopeDim) return "rope_head_dim: the fused MLA kernel takes at most 64";
  if (rank + rope > kMlaMaxRowWidth)
    return "kv_lora_rank + rope_head_dim: the fused MLA kernel takes at most 640";
  if (smem_bytes(hidden, rank, nope, rope, v_dim) > kMaxSmemBytes)
    return "hidden, kv_lora_rank: the fused MLA kernel's shared memory would exceed 227 KB";
  return nullptr;
}

int mla_decode_max_active_clusters(Element element, int hidden, int rank, int nope, int rope,
                                   int v_dim, int cluster_size) {
  const int smem = smem_bytes(hidden, rank, nope, rope, v_dim);
  if (smem > kMaxSmemBytes) return 0;
  return max_active_clusters_of(select_kernel(element), kMlaThreads, smem, cluster_size);
}

void launch_mla_decode(const MlaDecodeParams& p, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (p.element == Element::kBF16) launch_typed<__nv_bfloat16>(p, stream);
  else launch_typed<__half>(p, stream);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::decode::kernels
