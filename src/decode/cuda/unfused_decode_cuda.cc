// The unfused decode attention block on cuda: RMSNorm, three cuBLASLt projections, RoPE with
// the cache append, split-KV attention with its merge, the output projection (cuBLASLt). The
// baseline the fused kernel is measured against and the fallback for shapes it does not take.
#include <algorithm>
#include <cmath>

#include "decode/cuda/blaslt_linear.h"
#include "gemm/cuda/blaslt.h"
#include "decode/decode_backend.h"
#include "decode/split_kv_rule.h"
#include "decode/unfused_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::detail {

struct UnfusedPlan {
  AttentionBlockOptions options;
  int splits = 1;
  std::unique_ptr<BlasLtLinear> q_proj, k_proj, v_proj, o_proj;
  // Workspace offsets in bytes.
  size_t xn = 0, q = 0, k = 0, v = 0, partial_o = 0, partial_lse = 0, o = 0, blas = 0, total = 0;
};

std::shared_ptr<UnfusedPlan> cuda_plan_unfused(const AttentionBlockOptions& o) {
  const ModelConfig& m = o.model;
  TESSERA_CHECK(kernels::unfused_decode_supported(int(m.head_dim), int(m.group_size())),
                ErrorCode::kUnsupported, "model: head_dim = ", m.head_dim, " with ",
                m.group_size(), " query heads per KV head: the unfused decode path takes head_dim "
                "64, 128 or 256 and up to 16 query heads per KV head");
  auto plan = std::make_shared<UnfusedPlan>();
  plan->options = o;
  const int wave = cuda_multiprocessor_count() *
                   kernels::split_kv_ctas_per_multiprocessor(element_of(o.dtype), int(m.head_dim),
                                                             int(m.group_size()));
  plan->splits = split_kv_splits(o.max_batch, m.num_kv_heads, o.max_context, wave);
  const size_t e = dtype_size(o.dtype), b = size_t(o.max_batch);
  const int64_t q_rows = m.num_heads * m.head_dim, kv_rows = m.num_kv_heads * m.head_dim;
  size_t cursor = 0;
  plan->xn = workspace_slot(cursor, b * m.hidden * e);
  plan->q = workspace_slot(cursor, b * q_rows * e);
  plan->k = workspace_slot(cursor, b * kv_rows * e);
  plan->v = workspace_slot(cursor, b * kv_rows * e);
  plan->partial_o = workspace_slot(cursor, b * q_rows * plan->splits * 4);
  plan->partial_lse = workspace_slot(cursor, b * m.num_heads * plan->splits * 4);
  plan->o = workspace_slot(cursor, b * q_rows * e);
  plan->blas = workspace_slot(cursor, BlasLtLinear::kWorkspaceBytes);
  plan->total = cursor;
  cublasLtHandle_t h = gemm::blaslt_handle();
  plan->q_proj = std::make_unique<BlasLtLinear>(h, o.dtype, q_rows, m.hidden, o.max_batch);
  plan->k_proj = std::make_unique<BlasLtLinear>(h, o.dtype, kv_rows, m.hidden, o.max_batch);
  plan->v_proj = std::make_unique<BlasLtLinear>(h, o.dtype, kv_rows, m.hidden, o.max_batch);
  plan->o_proj = std::make_unique<BlasLtLinear>(h, o.dtype, m.hidden, q_rows, o.max_batch);
  return plan;
}

size_t cuda_unfused_workspace_bytes(const UnfusedPlan& plan) { return plan.total; }

void cuda_unfused_attention_block(const UnfusedPlan& plan, std::span<const float> inv_freq,
                                  const DecodeStep& step, const AttentionWeights& w,
                                  const KvCache& cache, const TensorView& workspace,
                                  const Stream& stream) {
  const AttentionBlockOptions& o = plan.options;
  const ModelConfig& m = o.model;
  char* ws = static_cast<char*>(workspace.data());
  kernels::UnfusedDecodeParams p;
  p.element = element_of(o.dtype);
  p.batch = int(step.x.size(0));
  p.hidden = int(m.hidden);
  p.num_heads = int(m.num_heads);
  p.num_kv_heads = int(m.num_kv_heads);
  p.head_dim = int(m.head_dim);
  p.x = step.x.data();
  p.input_norm = w.input_norm.empty() ? nullptr : w.input_norm.data();
  p.rms_eps = m.rms_norm_eps;
  p.xn = ws + plan.xn;
  p.q = ws + plan.q;
  p.k = ws + plan.k;
  p.v = ws + plan.v;
  p.k_cache = cache.k.data();
  p.v_cache = cache.v.data();
  set_cache_layout(cache, o.max_context, p);
  p.positions = step.positions.data_as<const int32_t>();
  p.softmax_scale = 1.0f / std::sqrt(float(m.head_dim));
  std::copy(inv_freq.begin(), inv_freq.end(), p.inv_freq);
  p.splits = plan.splits;
  p.partial_o = reinterpret_cast<float*>(ws + plan.partial_o);
  p.partial_lse = reinterpret_cast<float*>(ws + plan.partial_lse);
  p.o = ws + plan.o;
  auto s = static_cast<cudaStream_t>(stream.cuda_stream());
  void* blas_ws = ws + plan.blas;
  kernels::launch_rmsnorm(p, s);
  plan.q_proj->run(p.xn, w.wq.data(), p.q, p.batch, blas_ws, s);
  plan.k_proj->run(p.xn, w.wk.data(), p.k, p.batch, blas_ws, s);
  plan.v_proj->run(p.xn, w.wv.data(), p.v, p.batch, blas_ws, s);
  kernels::launch_rope_append(p, s);
  kernels::launch_split_kv_attention(p, s);
  plan.o_proj->run(p.o, w.wo.data(), step.out.data(), p.batch, blas_ws, s);
}

}  // namespace tessera::decode::detail
