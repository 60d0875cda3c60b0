// The registry of AllGather+GEMM launchers (ag_gemm_launch.h).
#include "gemm/launcher_registry.h"
#include "tp/ag_gemm_launch.h"

namespace tessera::tp::kernels {

using Registry = gemm::kernels::LauncherRegistry<gemm::kernels::GemmKey, AgGemmLauncher>;

bool register_ag_gemm_kernel(gemm::kernels::GemmKey key, AgGemmLauncher launcher) {
  return Registry::add(key, launcher);
}

AgGemmLauncher find_ag_gemm_kernel(gemm::kernels::GemmKey key) {
  return Registry::find(key);
}

}  // namespace tessera::tp::kernels
