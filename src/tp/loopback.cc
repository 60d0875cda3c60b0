// TpLoopback without the cuda backend: refused (tessera/tp/loopback.h).
#ifndef TESSERA_WITH_CUDA
#include "tessera/tp/loopback.h"

#include "tessera/core/error.h"

namespace tessera::tp {

struct TpLoopback::Impl {};

TpLoopback::TpLoopback(const TpPlan&, Device gpu) {
  throw_error(ErrorCode::kUnsupported,
              str("TpLoopback: device = ", gpu.to_string(),
                  ": this build has no cuda backend (loopback runs the GPU kernels)"));
}
TpLoopback::~TpLoopback() = default;
const TpPlan& TpLoopback::plan() const {
  throw_error(ErrorCode::kUnsupported, "no cuda backend");
}
int TpLoopback::rank_sms() const {
  return 0;
}
std::string TpLoopback::gemm_config() const {
  return "";
}
void TpLoopback::run(std::span<const TensorView>, std::span<const TensorView>,
                     std::span<const TensorView>, std::span<const TensorView>, const Stream&) {}
void TpLoopback::run_hooked_gemm(int, const TensorView&, const TensorView&, const TensorView&,
                                 const TensorView&, const Stream&) {}

}  // namespace tessera::tp
#endif
