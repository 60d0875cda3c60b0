// Which fused plans the cuda backend runs (tp_backend.h).
#include "tessera/core/error.h"
#include "tp/cuda/ag_gemm_kernel.h"
#include "tp/tp_backend.h"

namespace tessera::tp::detail {

void check_cuda_fused_supported(const TpPlan& plan) {
  const char* who = "fused tensor-parallel operation on cuda";
  switch (plan.request.op) {
    case TpOp::kAllGatherGemm:
      return check_ag_gemm_kernel_supports(plan, who);
    case TpOp::kGemmReduceScatter:
    case TpOp::kGemmAllToAll:
      TESSERA_CHECK(plan.request.num_machines == 1 && !plan.two_level, ErrorCode::kUnsupported, who,
                    ": ", tp_op_name(plan.request.op), " across ", plan.request.num_machines,
                    " machines is not built on cuda; expected one machine, or an unfused plan");
      return;
  }
}

}  // namespace tessera::tp::detail
