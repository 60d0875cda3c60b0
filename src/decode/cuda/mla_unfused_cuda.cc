// The unfused MLA decode block on cuda: RMSNorm, the Wq and Wkv_a projections (cuBLASLt), the
// latent row's norm, RoPE and append, the absorbed query, split-KV attention over the latent
// rows with its merge, the value up-projection, the output projection (cuBLASLt): the pipeline
// the fused MLA kernel is measured against (kernels/decode/mla_unfused_launch.h).
#include <algorithm>
#include <cmath>

#include "decode/cuda/blaslt_linear.h"
#include "decode/decode_backend.h"
#include "decode/mla_unfused_launch.h"
#include "decode/unfused_launch.h"
#include "gemm/cuda/blaslt.h"

namespace tessera::decode::detail {

struct MlaUnfusedPlan {
  AttentionBlockOptions options;
  int splits = 1;
  bool tensor_cores = false;  // the attention's form: tensor cores where they take the shape
  int64_t sms = 0;  // the device's multiprocessors: the merge's form is picked by them
  std::unique_ptr<BlasLtLinear> q_proj, kv_a_proj, o_proj;
  // Workspace offsets in bytes.
  size_t xn = 0, q = 0, lat = 0, ql = 0, partial_o = 0, partial_lse = 0, o_lat = 0, o_heads = 0;
  size_t blas = 0, total = 0;
};

std::shared_ptr<MlaUnfusedPlan> cuda_plan_mla_unfused(const AttentionBlockOptions& o) {
  const ModelConfig& m = o.model;
  auto plan = std::make_shared<MlaUnfusedPlan>();
  plan->options = o;
  // The attention stages latent rows 16 bytes at a time.
  const int64_t width = m.kv_lora_rank + m.rope_head_dim, rank = m.kv_lora_rank;
  TESSERA_CHECK_ARG(width % 8 == 0, "model.kv_lora_rank + model.rope_head_dim = ", width,
                    ": expected a multiple of 8");
  // Tensor cores where the kernel takes the shape (kv_lora_rank 512, rope_head_dim 64: the
  // DeepSeek-V2/V3 family): 0.96x to 7.1x the CUDA-core form's speed on one H200 (docs/PERF.md).
  plan->tensor_cores = kernels::mla_attention_takes_tensor_cores(int(rank), int(m.rope_head_dim));
  // Splits of at least one staged tile: each CTA's tiles run one after another, so at short
  // contexts many small splits beat a few long ones (at least 128 rows a split left 8 CTAs for a
  // 1k-token sequence). CUDA cores: enough (sequence, split) CTAs for two waves. Tensor cores
  // (95 KB of shared memory a CTA, few resident): as many as are resident at once and no more,
  // since a CTA past the wave runs a whole CTA's time after it (batch 16: 17 splits made 272
  // CTAs for 264 places).
  const int64_t sms = plan->sms = cuda_multiprocessor_count();
  const int64_t wanted =
      plan->tensor_cores
          ? sms * kernels::mla_attention_mma_ctas_per_sm() /
                (o.max_batch * kernels::mla_attention_mma_head_groups(int(m.num_heads)))
          : (2 * sms + o.max_batch - 1) / o.max_batch;
  plan->splits = int(std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, o.max_context / kernels::kMlaTileRows)));
  const size_t e = dtype_size(o.dtype), b = size_t(o.max_batch), h = size_t(m.num_heads);
  const int64_t q_rows = m.num_heads * (m.nope_head_dim + m.rope_head_dim);
  size_t cursor = 0;
  plan->xn = workspace_slot(cursor, b * m.hidden * e);
  plan->q = workspace_slot(cursor, b * q_rows * e);
  plan->lat = workspace_slot(cursor, b * width * e);
  plan->ql = workspace_slot(cursor, b * h * rank * 4);
  plan->partial_o = workspace_slot(cursor, b * h * plan->splits * rank * 4);
  plan->partial_lse = workspace_slot(cursor, b * h * plan->splits * 4);
  plan->o_lat = workspace_slot(cursor, b * h * rank * e);
  plan->o_heads = workspace_slot(cursor, b * h * m.v_head_dim * e);
  plan->blas = workspace_slot(cursor, BlasLtLinear::kWorkspaceBytes);
  plan->total = cursor;
  cublasLtHandle_t handle = gemm::blaslt_handle();
  plan->q_proj = std::make_unique<BlasLtLinear>(handle, o.dtype, q_rows, m.hidden, o.max_batch);
  plan->kv_a_proj = std::make_unique<BlasLtLinear>(handle, o.dtype, width, m.hidden, o.max_batch);
  plan->o_proj = std::make_unique<BlasLtLinear>(handle, o.dtype, m.hidden,
                                                m.num_heads * m.v_head_dim, o.max_batch);
  return plan;
}

size_t cuda_mla_unfused_workspace_bytes(const MlaUnfusedPlan& plan) { return plan.total; }

void cuda_mla_unfused_attention_block(const MlaUnfusedPlan& plan, std::span<const float> inv_freq,
                                      const DecodeStep& step, const LatentAttentionWeights& w,
                                      const KvCache& cache, const TensorView& workspace,
                                      const Stream& stream) {
  const ModelConfig& m = plan.options.model;
  const kernels::Element element = element_of(plan.options.dtype);
  char* ws = static_cast<char*>(workspace.data());
  const int batch = int(step.x.size(0));
  auto s = static_cast<cudaStream_t>(stream.cuda_stream());
  void* blas_ws = ws + plan.blas;

  kernels::UnfusedDecodeParams norm;  // the grouped path's RMSNorm: x -> xn
  norm.element = element;
  norm.batch = batch;
  norm.hidden = int(m.hidden);
  norm.x = step.x.data();
  norm.input_norm = w.input_norm.empty() ? nullptr : w.input_norm.data();
  norm.rms_eps = m.rms_norm_eps;
  norm.xn = ws + plan.xn;
  kernels::launch_rmsnorm(norm, s);

  kernels::MlaUnfusedParams p;
  p.element = element;
  p.batch = batch;
  p.num_heads = int(m.num_heads);
  p.rank = int(m.kv_lora_rank);
  p.nope = int(m.nope_head_dim);
  p.rope = int(m.rope_head_dim);
  p.v_dim = int(m.v_head_dim);
  p.q = ws + plan.q;
  p.lat = ws + plan.lat;
  p.kv_a_norm = w.kv_a_norm.data();
  p.rms_eps = m.rms_norm_eps;
  p.wkv_b = w.wkv_b.data();
  p.cache = cache.k.data();
  set_cache_layout(cache, plan.options.max_context, p);
  p.positions = step.positions.data_as<const int32_t>();
  p.softmax_scale = 1.0f / std::sqrt(float(m.nope_head_dim + m.rope_head_dim));
  std::copy(inv_freq.begin(), inv_freq.end(), p.inv_freq);
  p.ql = reinterpret_cast<float*>(ws + plan.ql);
  p.splits = plan.splits;
  p.tensor_cores = plan.tensor_cores;
  // The merge spread over column chunks while a CTA a (sequence, head) would leave
  // multiprocessors idle: at batch 1 (16 heads, up to 264 splits) 1.11x to 1.30x faster end to
  // end, at batch 16 (256 rows) 2% to 7% slower than the CTA a row (docs/PERF.md, fd1f947).
  p.merge_by_columns = int64_t(batch) * m.num_heads < plan.sms;
  p.partial_o = reinterpret_cast<float*>(ws + plan.partial_o);
  p.partial_lse = reinterpret_cast<float*>(ws + plan.partial_lse);
  p.o_lat = ws + plan.o_lat;
  p.o_heads = ws + plan.o_heads;

  plan.q_proj->run(norm.xn, w.wq.data(), p.q, batch, blas_ws, s);
  plan.kv_a_proj->run(norm.xn, w.wkv_a.data(), p.lat, batch, blas_ws, s);
  kernels::launch_mla_latent_append(p, s);
  kernels::launch_mla_absorb(p, s);
  kernels::launch_mla_split_attention(p, s);
  kernels::launch_mla_value_up(p, s);
  plan.o_proj->run(p.o_heads, w.wo.data(), step.out.data(), batch, blas_ws, s);
}

}  // namespace tessera::decode::detail
