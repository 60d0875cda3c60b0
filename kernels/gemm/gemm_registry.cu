// The registry of GEMM launchers (gemm_launch.h).
#include "gemm/gemm_launch.h"
#include "gemm/launcher_registry.h"

namespace tessera::gemm::kernels {

bool register_gemm_kernel(GemmKey key, GemmLauncher launcher) {
  return LauncherRegistry<GemmKey, GemmLauncher>::add(key, launcher);
}

GemmLauncher find_gemm_kernel(GemmKey key) {
  return LauncherRegistry<GemmKey, GemmLauncher>::find(key);
}

}  // namespace tessera::gemm::kernels
