// Internal: what attention_block.cc hands the cuda backend after validating every argument.
// Implemented in src/decode/cuda/ (built only with TESSERA_CUDA=ON).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tessera/decode/attention_block.h"
#ifdef TESSERA_WITH_CUDA
#include "decode/decode_launch.h"
#endif

namespace tessera::decode::detail {

#ifdef TESSERA_WITH_CUDA
// The kernels' element type of a validated dtype (bf16 or fp16).
inline kernels::Element element_of(DType dtype) {
  return dtype == DType::kBF16 ? kernels::Element::kBF16 : kernels::Element::kF16;
}

// The cache layout fields every kernel parameter struct has (page_table, pages_per_seq,
// num_pages, page_size for a paged cache, context_stride for a contiguous one, and max_context
// where the struct has it: the plan's bound, or what the cache holds if less), from `cache`.
template <typename Params>
void set_cache_layout(const KvCache& cache, int64_t plan_max_context, Params& p) {
  int64_t holds;
  if (!cache.page_table.empty()) {
    p.page_table = cache.page_table.data_as<const int32_t>();
    p.pages_per_seq = cache.page_table.size(1);
    p.num_pages = cache.k.size(0);
    p.page_size = cache.k.size(1);
    holds = p.pages_per_seq * p.page_size;
  } else {
    p.context_stride = cache.k.size(1);
    holds = p.context_stride;
  }
  if constexpr (requires { p.max_context; }) p.max_context = std::min(holds, plan_max_context);
  (void)holds;
  (void)plan_max_context;
}

// A 256-byte aligned slot of `bytes` in a workspace being laid out; returns its offset.
inline size_t workspace_slot(size_t& cursor, size_t bytes) {
  const size_t at = cursor;
  cursor += (bytes + 255) / 256 * 256;
  return at;
}

// Clusters of `cluster_size` that can run at once for this plan on the current device (0:
// the size cannot be launched: too few SMs in a GPC, or not enough shared memory).
int cuda_max_active_clusters(const AttentionBlockOptions& options, int cluster_size);
// Multiprocessors and name of the current device.
int cuda_multiprocessor_count();
std::string cuda_device_name();
// inv_freq: rope_inv_freq(options.model), head_dim / 2 values.
void cuda_fused_attention_block(const AttentionBlockOptions& options, int cluster_size,
                                std::span<const float> inv_freq, const DecodeStep& step, const AttentionWeights& weights,
                                const KvCache& cache, const TensorView& workspace,
                                const Stream& stream);

// MLA plans (model.kind kLatent, src/decode/cuda/mla_decode_cuda.cc): empty if the fused MLA
// kernel takes the model's shape, else why not (naming the field); the launch, inv_freq
// rope_head_dim / 2 values.
std::string cuda_mla_unsupported_reason(const ModelConfig& model);
void cuda_mla_attention_block(const AttentionBlockOptions& options, int cluster_size,
                              std::span<const float> inv_freq, const DecodeStep& step,
                              const LatentAttentionWeights& weights, const KvCache& cache,
                              const TensorView& workspace, const Stream& stream);

// MLA's unfused path (src/decode/cuda/mla_unfused_cuda.cc), planned like the grouped one.
struct MlaUnfusedPlan;
std::shared_ptr<MlaUnfusedPlan> cuda_plan_mla_unfused(const AttentionBlockOptions& options);
size_t cuda_mla_unfused_workspace_bytes(const MlaUnfusedPlan& plan);
void cuda_mla_unfused_attention_block(const MlaUnfusedPlan& plan, std::span<const float> inv_freq,
                                      const DecodeStep& step, const LatentAttentionWeights& weights,
                                      const KvCache& cache, const TensorView& workspace,
                                      const Stream& stream);

// The unfused path (src/decode/cuda/unfused_decode_cuda.cc): planned once (cuBLASLt
// descriptors and algorithms for every batch up to max_batch), then run per step.
struct UnfusedPlan;
std::shared_ptr<UnfusedPlan> cuda_plan_unfused(const AttentionBlockOptions& options);
size_t cuda_unfused_workspace_bytes(const UnfusedPlan& plan);
void cuda_unfused_attention_block(const UnfusedPlan& plan, std::span<const float> inv_freq,
                                  const DecodeStep& step, const AttentionWeights& weights,
                                  const KvCache& cache, const TensorView& workspace,
                                  const Stream& stream);
#endif

}  // namespace tessera::decode::detail
