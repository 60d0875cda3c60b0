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
std::vector<std::pair<GemmKey, GemmLauncher>>& registry() {
  static std::vector<std::pair<GemmKey, GemmLauncher>> entries;
  return entries;
}
}  // namespace

bool register_gemm_kernel(GemmKey key, GemmLauncher launcher) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().emplace_back(key, launcher);
  return true;
}

GemmLauncher find_gemm_kernel(GemmKey key) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& [k, fn] : registry()) {
    if (k == key) return fn;
  }
  return {};
}

}  // namespace tessera::gemm::kernels
