#include "bench_stats.h"

#include <algorithm>

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::cli {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string first_gpu_name() {
#ifdef TESSERA_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) return prop.name;
#endif
  return "unknown";
}

}  // namespace tessera::cli
