// The registry of GEMM launchers (gemm_launch.h).
#include <mutex>
#include <utility>
#include <vector>

#include "gemm/gemm_launch.h"

namespace tessera::gemm::kernels {

namespace {
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<std::pair<GemmKey, GemmLaunchFn>>& registry() {
  static std::vector<std::pair<GemmKey, GemmLaunchFn>> entries;
  return entries;
}
}  // namespace

bool register_gemm_kernel(GemmKey key, GemmLaunchFn launch) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().emplace_back(key, launch);
  return true;
}

GemmLaunchFn find_gemm_kernel(GemmKey key) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& [k, fn] : registry()) {
    if (k == key) return fn;
  }
  return nullptr;
}

}  // namespace tessera::gemm::kernels
