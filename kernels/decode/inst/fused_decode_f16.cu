// The fused decode kernels for f16 (every group size and batch tile).
#include "decode/fused_decode_dispatch.cuh"

namespace tessera::decode::kernels {
void launch_fused_decode_f16(const FusedDecodeParams& p, cudaStream_t stream) {
  sm90::launch<__half>(p, stream);
}
int max_active_clusters_f16(int group, int batch, int hidden, int cluster_size) {
  return sm90::max_active_clusters<__half>(group, batch, hidden, cluster_size);
}
}  // namespace tessera::decode::kernels
