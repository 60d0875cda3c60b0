// The fused decode launch entry points (decode_launch.h): dispatch on the element type to the
// instantiation files in inst/.
#include <cuda_runtime.h>

#include "decode/decode_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::kernels {

void launch_fused_decode_bf16(const FusedDecodeParams& p, cudaStream_t stream);
void launch_fused_decode_f16(const FusedDecodeParams& p, cudaStream_t stream);
int max_active_clusters_bf16(int group, int batch, int hidden, int cluster_size);
int max_active_clusters_f16(int group, int batch, int hidden, int cluster_size);

bool fused_decode_group_supported(int group) {
  return group == 1 || group == 2 || group == 4 || group == 8;
}

int fused_decode_max_active_clusters(Element element, int group, int batch, int hidden,
                                     int cluster_size) {
  return element == Element::kBF16 ? max_active_clusters_bf16(group, batch, hidden, cluster_size)
                                   : max_active_clusters_f16(group, batch, hidden, cluster_size);
}

void launch_fused_decode(const FusedDecodeParams& p, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (p.element == Element::kBF16) launch_fused_decode_bf16(p, stream);
  else launch_fused_decode_f16(p, stream);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::decode::kernels
