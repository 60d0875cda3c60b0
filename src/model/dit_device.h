// Pieces the DiT models on device tensors (flux_transformer.cc, cogvideox_transformer.cc) share.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include <vector>

#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/gemm/gemm.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::model {

// One gemm::Gemm per (M, N, K, bias), planned at first use.
using GemmPlans =
    std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::unique_ptr<gemm::Gemm>>;

// out = a weight^T + bias over a's rows (nothing for 0 rows); weight [N, K], bias [N] or empty,
// every tensor of `dtype` on `device`.
void planned_linear(GemmPlans& plans, const TensorView& a, const Tensor& weight, const Tensor& bias,
                    const TensorView& out, DType dtype, Device device, const Stream& stream);

// Plans the joint attention of `tokens` sequence tokens beside `joint` text tokens (batch 1,
// `heads` heads of head_dim, not causal) into `attention`, whose buffers go before the new
// plan's are made; returns this rank's sequence tokens (0-based) in local row order.
std::vector<int64_t> replan_joint_attention(std::unique_ptr<sp::SpAttention>& attention,
                                            RankContext& ctx, int64_t tokens, int64_t joint,
                                            int64_t heads, int64_t head_dim, DType dtype,
                                            const sp::PlanOptions& options);

// A contiguous [1, n] view of elements [first, first + n) of t (a slice of a modulation row).
TensorView row_span(const Tensor& t, int64_t first, int64_t n);

}  // namespace tessera::model
