#include "model/dit_device.h"

#include <cstddef>

namespace tessera::model {

void planned_linear(GemmPlans& plans, const TensorView& a, const Tensor& weight, const Tensor& bias,
                    const TensorView& out, DType dtype, Device device, const Stream& stream) {
  const int64_t m = a.size(0), n = weight.view().size(0), k = weight.view().size(1);
  if (m == 0) return;
  const bool has_bias = !bias.view().empty();
  auto& g = plans[{m, n, k, has_bias}];
  if (!g)
    g = std::make_unique<gemm::Gemm>(gemm::GemmShape{m, n, k, dtype, dtype, true, has_bias},
                                     device);
  g->run(a, weight, has_bias ? bias.view() : TensorView(), out, stream);
}

std::vector<int64_t> replan_joint_attention(std::unique_ptr<sp::SpAttention>& attention,
                                            RankContext& ctx, int64_t tokens, int64_t joint,
                                            int64_t heads, int64_t head_dim, DType dtype,
                                            const sp::PlanOptions& options) {
  attention.reset();
  attention = sp::SpAttention::create(
      ctx, sp::joint_attention_request(tokens, joint, heads, head_dim, dtype, options));
  return attention->local_sequence_tokens();
}

TensorView row_span(const Tensor& t, int64_t first, int64_t n) {
  auto* data = static_cast<std::byte*>(t.data()) + size_t(first) * t.view().element_size();
  return TensorView(data, t.view().dtype(), t.view().device(), {1, n});
}

}  // namespace tessera::model
