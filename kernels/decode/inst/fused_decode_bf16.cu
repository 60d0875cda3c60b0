// The fused decode kernels for bf16 (every group size and batch tile).
#include "decode/fused_decode_dispatch.cuh"

namespace tessera::decode::kernels {
void launch_fused_decode_bf16(const FusedDecodeParams& p, cudaStream_t stream) {
  sm90::launch<__nv_bfloat16>(p, stream);
}
int max_active_clusters_bf16(int group, int batch, int cluster_size) {
  return sm90::max_active_clusters<__nv_bfloat16>(group, batch, cluster_size);
}
int smem_bytes_bf16(int group, int batch) {
  int smem = 0, tile = 0;
  return sm90::select_kernel<__nv_bfloat16>(group, batch, smem, tile) ? smem : 0;
}
}  // namespace tessera::decode::kernels
