#include <cuda_runtime.h>
#include <nccl.h>

#include "cutlass/version.h"
#include "tessera/core/error.h"
#include "tessera/runtime/build_info.h"

namespace tessera {

namespace {
std::string cuda_version_text(int v) { return str(v / 1000, ".", (v % 1000) / 10); }
std::string nccl_version_text(int v) {
  return str(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}
}  // namespace

void fill_cuda_build_info(BuildInfo& info) {
  int v = 0;
  info.cuda_runtime = cudaRuntimeGetVersion(&v) == cudaSuccess ? cuda_version_text(v) : "?";
  info.cuda_driver = cudaDriverGetVersion(&v) == cudaSuccess && v > 0 ? cuda_version_text(v) : "none";
  cudaGetLastError();
  info.nccl_compiled = TESSERA_NCCL_VERSION;
  info.nccl_runtime = ncclGetVersion(&v) == ncclSuccess ? nccl_version_text(v) : "?";
  info.nvshmem = TESSERA_NVSHMEM_VERSION;
  info.cutlass = str(CUTLASS_MAJOR, ".", CUTLASS_MINOR, ".", CUTLASS_PATCH);
}

std::vector<GpuInfo> cuda_visible_gpus() {
  std::vector<GpuInfo> gpus;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return gpus;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    GpuInfo g;
    g.index = d;
    g.name = p.name;
    g.sm_count = p.multiProcessorCount;
    g.compute_major = p.major;
    g.compute_minor = p.minor;
    g.memory_gib = double(p.totalGlobalMem) / double(1ull << 30);
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) == cudaSuccess) g.pci_bus_id = bus;
    gpus.push_back(g);
  }
  return gpus;
}

}  // namespace tessera
