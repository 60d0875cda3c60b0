#include "tessera/runtime/build_info.h"

namespace tessera {

#ifdef TESSERA_WITH_CUDA
void fill_cuda_build_info(BuildInfo& info);
std::vector<GpuInfo> cuda_visible_gpus();
#endif

BuildInfo build_info() {
  BuildInfo info;
  info.version = "0.1.0";
#ifdef TESSERA_WITH_CUDA
  info.has_cuda = true;
  fill_cuda_build_info(info);
#endif
  return info;
}

std::vector<GpuInfo> visible_gpus() {
#ifdef TESSERA_WITH_CUDA
  return cuda_visible_gpus();
#else
  return {};
#endif
}

std::string device_name(const Device& device) {
  if (!device.is_cuda()) return "cpu";
  for (const GpuInfo& g : visible_gpus())
    if (g.index == device.index) return g.name;
  return "cuda";
}

}  // namespace tessera
