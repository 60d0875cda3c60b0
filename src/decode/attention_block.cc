// decode::AttentionBlock: validates the plan and each step, picks the cluster size, and runs
// the fused dataflow on the cuda backend or its float32 emulation on the cpu backend (MLA plans
// too); unfused, cuBLASLt projections around split-KV attention on cuda, the float64
// references on the cpu.
#include "tessera/decode/attention_block.h"

#include <algorithm>
#include <optional>

#include "decode/decode_backend.h"
#include "decode/latent_reference.h"
#include "decode/reference.h"
#include "decode/split_emulation.h"
#include "decode/split_geometry.h"
#include "tessera/core/error.h"
#include "tessera/decode/tune_table.h"

#ifdef TESSERA_WITH_CUDA
#include "decode/decode_launch.h"
#endif

namespace tessera::decode {
namespace {

constexpr int kFusedHeadDim = 128;    // kernels::kHeadDim
constexpr int kFusedHiddenAlign = 128;  // kernels::kHiddenAlign
constexpr int kFusedMaxHiddenSlice = 4096;  // kernels::kMaxHiddenSlice
constexpr int kMaxClusterSize = 16;

bool divides_hidden(int64_t hidden, int n, bool cuda) {
  return hidden % n == 0 &&
         (!cuda || ((hidden / n) % kFusedHiddenAlign == 0 && hidden / n <= kFusedMaxHiddenSlice));
}

// Whether a cluster of n CTAs a query head divides every cut of the MLA dataflow.
bool latent_cuts(const ModelConfig& m, int n) {
  return latent_cluster_divides(m.hidden, m.kv_lora_rank, m.nope_head_dim, m.rope_head_dim, n);
}

// Without a tuned table: the largest power-of-two cluster whose CTAs all run in one wave
// (KV heads, or MLA's query heads, x N <= SMs, and every cluster resident at once on this
// device).
int default_cluster_size(const AttentionBlockOptions& o) {
  const bool cuda = o.device.is_cuda();
  const ModelConfig& m = o.model;
  int sms = 132;
#ifdef TESSERA_WITH_CUDA
  if (cuda) sms = detail::cuda_multiprocessor_count();
#endif
  if (m.kind == AttentionKind::kLatent) {  // a cluster a query head
    int best = 1;
    for (int n = 1; n <= kMaxClusterSize; n *= 2) {
      if (!latent_cuts(m, n) || m.num_heads * n > sms)
        continue;
#ifdef TESSERA_WITH_CUDA
      if (cuda && detail::cuda_max_active_clusters(o, n) < m.num_heads) continue;
#endif
      best = n;
    }
    return best;
  }
  int best = 1;
  for (int n = 1; n <= kMaxClusterSize; n *= 2) {
    if (!divides_hidden(o.model.hidden, n, cuda) || o.model.num_kv_heads * n > sms) continue;
#ifdef TESSERA_WITH_CUDA
    if (cuda && detail::cuda_max_active_clusters(o, n) < o.model.num_kv_heads) continue;
#endif
    best = n;
  }
  return best;
}

void check_matrix(const TensorView& t, const char* what, int64_t rows, int64_t cols, DType dtype,
                  Device device) {
  TESSERA_CHECK_ARG(!t.empty(), what, ": expected a tensor, got an empty view");
  TESSERA_CHECK_ARG(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, what, " = ",
                    t.to_string(), ": expected shape [", rows, ", ", cols, "]");
  check_dtype(t, dtype, what);
  check_device(t, device, what);
  check_contiguous(t, what);
}

void check_vector(const TensorView& t, const char* what, int64_t n, DType dtype, Device device) {
  TESSERA_CHECK_ARG(!t.empty(), what, ": expected a tensor, got an empty view");
  TESSERA_CHECK_ARG(t.ndim() == 1 && t.size(0) == n, what, " = ", t.to_string(), ": expected [", n,
                    "]");
  check_dtype(t, dtype, what);
  check_device(t, device, what);
  check_contiguous(t, what);
}

// A cache tensor of `heads` rows of `width` a token: k or v (grouped), the latent rows (MLA).
void check_cache_tensor(const TensorView& t, const char* what, const AttentionBlockOptions& o,
                        int64_t batch, int64_t heads, int64_t width) {
  TESSERA_CHECK_ARG(!t.empty() && t.ndim() == 4, what, " = ", t.to_string(),
                    ": expected a 4-d cache tensor");
  if (o.paged) {
    TESSERA_CHECK_ARG(t.size(1) == o.page_size && t.size(2) == heads && t.size(3) == width, what,
                      " = ", t.to_string(), ": expected [num_pages, ", o.page_size, ", ", heads,
                      ", ", width, "]");
  } else {
    TESSERA_CHECK_ARG(t.size(0) >= batch && t.size(1) >= o.max_context && t.size(2) == heads &&
                          t.size(3) == width,
                      what, " = ", t.to_string(), ": expected [>= ", batch,
                      ", >= max_context = ", o.max_context, ", ", heads, ", ", width, "]");
  }
  check_dtype(t, o.dtype, what);
  check_device(t, o.device, what);
  check_contiguous(t, what);
}

// The step's x, out and positions and the stream against the plan; returns the batch.
int64_t check_step(const AttentionBlockOptions& o, const DecodeStep& step, const Stream& stream) {
  const Device dev = o.device;
  TESSERA_CHECK_ARG(stream.device() == dev, "stream on ", stream.device().to_string(),
                    ": expected the plan's device ", dev.to_string());
  TESSERA_CHECK_ARG(!step.x.empty() && step.x.ndim() == 2, "x = ", step.x.to_string(),
                    ": expected [batch, hidden]");
  const int64_t batch = step.x.size(0);
  TESSERA_CHECK_ARG(batch >= 1 && batch <= o.max_batch, "x: batch = ", batch,
                    ": expected 1 to max_batch = ", o.max_batch);
  check_matrix(step.x, "x", batch, o.model.hidden, o.dtype, dev);
  check_matrix(step.out, "out", batch, o.model.hidden, o.dtype, dev);
  TESSERA_CHECK_ARG(step.positions.ndim() == 1 && step.positions.size(0) == batch,
                    "positions = ", step.positions.to_string(), ": expected i32 [", batch, "]");
  check_dtype(step.positions, DType::kI32, "positions");
  check_device(step.positions, dev, "positions");
  return batch;
}

void check_page_table(const AttentionBlockOptions& o, const KvCache& cache, int64_t batch) {
  TESSERA_CHECK_ARG(o.paged != cache.page_table.empty(), "cache.page_table: the plan is ",
                    o.paged ? "paged: expected a page table" : "contiguous: expected none");
  if (!o.paged) return;
  const TensorView& pt = cache.page_table;
  TESSERA_CHECK_ARG(
      pt.ndim() == 2 && pt.size(0) >= batch && pt.size(1) * o.page_size >= o.max_context,
      "cache.page_table = ", pt.to_string(), ": expected i32 [>= ", batch,
      ", >= max_context / page_size = ", (o.max_context + o.page_size - 1) / o.page_size, "]");
  check_dtype(pt, DType::kI32, "cache.page_table");
  check_device(pt, o.device, "cache.page_table");
  check_contiguous(pt, "cache.page_table");
}

// cpu: the positions are on the host, so they are checked here (page indices are checked as
// the cache is addressed, cpu_cache.h).
void check_host_positions(const AttentionBlockOptions& o, const DecodeStep& step, int64_t batch) {
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t p = step.positions.data_as<const int32_t>()[b];
    TESSERA_CHECK_ARG(p >= 0 && p < o.max_context, "positions[", b, "] = ", p,
                      ": expected 0 <= p < max_context = ", o.max_context);
  }
}

// The model's shape checks, by kind.
void check_model(const ModelConfig& m) {
  if (m.kind == AttentionKind::kLatent) {
    TESSERA_CHECK_ARG(
        m.hidden > 0 && m.num_heads > 0 && m.kv_lora_rank > 0 && m.nope_head_dim > 0 &&
            m.v_head_dim > 0,
        "model = ", m.name,
        ": hidden, num_heads, kv_lora_rank, nope_head_dim and v_head_dim must be > 0");
    TESSERA_CHECK_ARG(m.rope_head_dim > 0 && m.rope_head_dim % 2 == 0,
                      "model.rope_head_dim = ", m.rope_head_dim,
                      ": expected an even, positive width (RoPE rotates pairs)");
    return;
  }
  TESSERA_CHECK_ARG(m.hidden > 0 && m.num_heads > 0 && m.num_kv_heads > 0 && m.head_dim > 0,
                    "model = ", m.name,
                    ": hidden, num_heads, num_kv_heads and head_dim must be > 0");
  TESSERA_CHECK_ARG(m.num_heads % m.num_kv_heads == 0, "model.num_kv_heads = ", m.num_kv_heads,
                    ": expected a divisor of num_heads = ", m.num_heads);
  TESSERA_CHECK_ARG(m.head_dim % 2 == 0, "model.head_dim = ", m.head_dim,
                    ": expected an even head dimension (RoPE rotates halves)");
}

#ifdef TESSERA_WITH_CUDA
// Empty if the fused kernel takes the model's shape, else why not.
std::string fused_unsupported_reason(const ModelConfig& m) {
  if (m.head_dim != kFusedHeadDim)
    return str("model.head_dim = ", m.head_dim, ": the fused decode kernel takes head_dim 128");
  if (!kernels::fused_decode_group_supported(int(m.group_size())))
    return str("model: num_heads / num_kv_heads = ", m.group_size(),
               ": the fused decode kernel takes 1, 2, 4 or 8 query heads per KV head");
  if (m.hidden % kFusedHiddenAlign != 0)
    return str("model.hidden = ", m.hidden, ": the fused decode kernel needs a multiple of ",
               kFusedHiddenAlign);
  return {};
}
#endif

}  // namespace

AttentionBlock::AttentionBlock(const AttentionBlockOptions& options) : options_(options) {
  const ModelConfig& m = options.model;
  const bool cuda = options.device.is_cuda();
  const bool latent = m.kind == AttentionKind::kLatent;
  check_model(m);
  TESSERA_CHECK_ARG(options.max_batch >= 1, "max_batch = ", options.max_batch,
                    ": expected at least 1");
  TESSERA_CHECK_ARG(options.max_context >= 1 && options.max_context <= (int64_t{1} << 30),
                    "max_context = ", options.max_context, ": expected 1 to 2^30 tokens");
  TESSERA_CHECK_ARG(!options.paged || options.page_size >= 1, "page_size = ", options.page_size,
                    ": expected at least 1");
  TESSERA_CHECK_ARG(options.dtype == DType::kBF16 || options.dtype == DType::kF16 ||
                        (!cuda && options.dtype == DType::kF32),
                    "dtype = ", dtype_name(options.dtype), ": expected bf16 or f16",
                    cuda ? "" : " (or f32 on the cpu backend)");
  if (cuda) {
#ifndef TESSERA_WITH_CUDA
    throw_error(ErrorCode::kUnsupported, "device = cuda: this build of Tessera has no cuda backend");
#else
    if (latent) {
      const std::string why = detail::cuda_mla_unsupported_reason(m);
      TESSERA_CHECK(why.empty(), ErrorCode::kUnsupported, why);
      // kAuto: unfused, faster than the fused kernel at every measured shape (0.11x to 0.18x
      // of its time on one H200, docs/PERF.md) until the fused kernel reads the latent cache
      // once for all heads (docs/ARCHITECTURE.md).
      if (options.impl != DecodeImpl::kFused) {
        impl_ = DecodeImpl::kUnfused;
        mla_unfused_ = detail::cuda_plan_mla_unfused(options);
        inv_freq_ = rope_inv_freq(m);
        return;
      }
    }
    std::string why_not = latent ? std::string{} : fused_unsupported_reason(m);
    if (!latent && why_not.empty() && options.paged && options.page_size % 16 != 0)
      why_not = str("page_size = ", options.page_size,
                    ": the fused decode kernel loads 16 cached tokens a copy (pages of a multiple of 16)");
    TESSERA_CHECK(options.impl != DecodeImpl::kFused || why_not.empty(), ErrorCode::kUnsupported,
                  "impl = fused: ", why_not);
    // kAuto takes the fused kernel only where it beat the unfused path with the tensor-core
    // split-KV kernel in one run on an H200 (docs/PERF.md): Llama-2's single-head groups at
    // batch 1 and up to 4096 positions (61.6 vs 78.4 us at 1024, 84.7 vs 90.5 at 4096; 161 vs
    // 138 at 16384); Llama-3's groups of 4 lost at every batch and context measured.
    const bool fused_pays =
        m.group_size() == 1 && options.max_batch == 1 && options.max_context <= 4096;
    const bool fused = options.impl == DecodeImpl::kFused ||
                       (options.impl == DecodeImpl::kAuto && why_not.empty() && fused_pays);
    impl_ = fused ? DecodeImpl::kFused : DecodeImpl::kUnfused;
    if (!latent && impl_ == DecodeImpl::kUnfused) {
      unfused_ = detail::cuda_plan_unfused(options);
      inv_freq_ = rope_inv_freq(m);
      return;
    }
#endif
  } else {
    impl_ = options.impl == DecodeImpl::kUnfused ? DecodeImpl::kUnfused : DecodeImpl::kFused;
  }
  if (options.cluster_size != 0) {
    TESSERA_CHECK_ARG(options.cluster_size >= 1 && options.cluster_size <= kMaxClusterSize,
                      "cluster_size = ", options.cluster_size, ": expected 0 (auto) or 1 to 16");
    if (latent) {
      TESSERA_CHECK_ARG(latent_cuts(m, options.cluster_size),
                        "cluster_size = ", options.cluster_size, ": expected a divisor of hidden = ",
                        m.hidden, ", kv_lora_rank = ", m.kv_lora_rank,
                        ", nope_head_dim + rope_head_dim = ", m.nope_head_dim + m.rope_head_dim,
                        " and kv_lora_rank + rope_head_dim = ", m.kv_lora_rank + m.rope_head_dim);
    } else {
      TESSERA_CHECK_ARG(divides_hidden(m.hidden, options.cluster_size, cuda), "cluster_size = ",
                        options.cluster_size, ": expected a divisor of hidden = ", m.hidden,
                        cuda ? " leaving a multiple of 128, at most 4096, per CTA" : "");
    }
    cluster_size_ = options.cluster_size;
  } else {
    cluster_size_ = default_cluster_size(options);
    cluster_source_ = "cost model";
#ifdef TESSERA_WITH_CUDA
    if (cuda) {
      const std::optional<int> tuned =
          tuned_cluster_size(read_tune_table(tune_table_path()), detail::cuda_device_name(),
                             m.name, options.max_batch, options.max_context);
      const bool cuts =
          tuned && (latent ? latent_cuts(m, *tuned) : divides_hidden(m.hidden, *tuned, cuda));
      if (cuts && detail::cuda_max_active_clusters(options, *tuned) > 0) {
        cluster_size_ = *tuned;
        cluster_source_ = "tuned";
      }
    }
#endif
  }
#ifdef TESSERA_WITH_CUDA
  if (cuda && latent) {
    TESSERA_CHECK(detail::cuda_max_active_clusters(options, cluster_size_) > 0,
                  ErrorCode::kUnsupported, "cluster_size = ", cluster_size_,
                  ": this device cannot launch a cluster of that many fused MLA decode CTAs");
  } else if (cuda) {
    const int smem = kernels::fused_decode_smem_bytes(int(m.group_size()),
                                                      int(std::min<int64_t>(options.max_batch, 16)),
                                                      int(m.hidden), cluster_size_);
    TESSERA_CHECK(smem <= kernels::kMaxSmemBytes, ErrorCode::kUnsupported, "cluster_size = ",
                  cluster_size_, ": the fused kernel's hidden slice of ", m.hidden / cluster_size_,
                  " needs ", smem / 1024, " KB of shared memory at max_batch = ", options.max_batch,
                  " (at most ", kernels::kMaxSmemBytes / 1024, " KB): expected a larger cluster size");
    TESSERA_CHECK(detail::cuda_max_active_clusters(options, cluster_size_) > 0,
                  ErrorCode::kUnsupported, "cluster_size = ", cluster_size_,
                  ": this device cannot launch a cluster of that many fused decode CTAs");
  }
#endif
  inv_freq_ = rope_inv_freq(m);
}

size_t AttentionBlock::workspace_bytes() const {
  const ModelConfig& m = options_.model;
  if (m.kind == AttentionKind::kLatent) {  // cuda fused: each query head's output partial
#ifdef TESSERA_WITH_CUDA
    if (mla_unfused_) return detail::cuda_mla_unfused_workspace_bytes(*mla_unfused_);
#endif
    return options_.device.is_cuda()
               ? size_t(m.num_heads) * options_.max_batch * m.hidden * sizeof(float)
               : 0;
  }
#ifdef TESSERA_WITH_CUDA
  if (unfused_) return detail::cuda_unfused_workspace_bytes(*unfused_);
#endif
  return size_t(options_.model.num_kv_heads) * options_.max_batch * options_.model.hidden *
         sizeof(float);
}

std::string AttentionBlock::describe() const {
  if (impl_ == DecodeImpl::kUnfused)
    return str(options_.model.name, " unfused ", dtype_name(options_.dtype),
               options_.paged ? " paged" : " contiguous");
  return str(options_.model.name, " fused cluster ", cluster_size_, " (", cluster_source_, ") ",
             dtype_name(options_.dtype), options_.paged ? " paged" : " contiguous");
}

void AttentionBlock::run(const DecodeStep& step, const AttentionWeights& w, const KvCache& cache,
                         const TensorView& workspace, const Stream& stream) const {
  const ModelConfig& m = options_.model;
  const Device dev = options_.device;
  TESSERA_CHECK_ARG(m.kind == AttentionKind::kGrouped,
                    "weights: AttentionWeights for model = ", m.name,
                    ", an MLA plan: expected LatentAttentionWeights");
  const int64_t batch = check_step(options_, step, stream);
  const int64_t q_rows = m.num_heads * m.head_dim, kv_rows = m.num_kv_heads * m.head_dim;
  check_matrix(w.wq, "weights.wq", q_rows, m.hidden, options_.dtype, dev);
  check_matrix(w.wk, "weights.wk", kv_rows, m.hidden, options_.dtype, dev);
  check_matrix(w.wv, "weights.wv", kv_rows, m.hidden, options_.dtype, dev);
  check_matrix(w.wo, "weights.wo", m.hidden, q_rows, options_.dtype, dev);
  if (!w.input_norm.empty())
    check_vector(w.input_norm, "weights.input_norm", m.hidden, options_.dtype, dev);
  check_cache_tensor(cache.k, "cache.k", options_, batch, m.num_kv_heads, m.head_dim);
  check_cache_tensor(cache.v, "cache.v", options_, batch, m.num_kv_heads, m.head_dim);
  check_page_table(options_, cache, batch);
  if (dev.is_cuda()) {
    check_device(workspace, dev, "workspace");
    check_min_bytes(workspace, workspace_bytes(), "workspace");
#ifdef TESSERA_WITH_CUDA
    if (unfused_)
      detail::cuda_unfused_attention_block(*unfused_, inv_freq_, step, w, cache, workspace, stream);
    else
      detail::cuda_fused_attention_block(options_, cluster_size_, inv_freq_, step, w, cache,
                                         workspace, stream);
#endif
    return;
  }
  check_host_positions(options_, step, batch);
  if (impl_ == DecodeImpl::kUnfused)
    reference_attention_block(m, step, w, cache, options_.page_size);
  else
    split_attention_block(m, step, w, cache, options_.page_size, cluster_size_);
}

void AttentionBlock::run(const DecodeStep& step, const LatentAttentionWeights& w,
                         const KvCache& cache, const TensorView& workspace,
                         const Stream& stream) const {
  const ModelConfig& m = options_.model;
  const Device dev = options_.device;
  const DType dt = options_.dtype;
  TESSERA_CHECK_ARG(m.kind == AttentionKind::kLatent,
                    "weights: LatentAttentionWeights for model = ", m.name,
                    ", a grouped-attention plan: expected AttentionWeights");
  const int64_t batch = check_step(options_, step, stream);
  const int64_t heads = m.num_heads, rank = m.kv_lora_rank, dr = m.rope_head_dim;
  check_matrix(w.wq, "weights.wq", heads * (m.nope_head_dim + dr), m.hidden, dt, dev);
  check_matrix(w.wkv_a, "weights.wkv_a", rank + dr, m.hidden, dt, dev);
  check_vector(w.kv_a_norm, "weights.kv_a_norm", rank, dt, dev);
  check_matrix(w.wkv_b, "weights.wkv_b", heads * (m.nope_head_dim + m.v_head_dim), rank, dt, dev);
  check_matrix(w.wo, "weights.wo", m.hidden, heads * m.v_head_dim, dt, dev);
  if (!w.input_norm.empty()) check_vector(w.input_norm, "weights.input_norm", m.hidden, dt, dev);
  check_cache_tensor(cache.k, "cache.k", options_, batch, 1, rank + dr);
  TESSERA_CHECK_ARG(cache.v.empty(), "cache.v = ", cache.v.to_string(),
                    ": an MLA cache keeps its values in the latent rows of cache.k: expected an "
                    "empty view");
  check_page_table(options_, cache, batch);
  if (dev.is_cuda()) {
    check_device(workspace, dev, "workspace");
    check_min_bytes(workspace, workspace_bytes(), "workspace");
#ifdef TESSERA_WITH_CUDA
    if (mla_unfused_)
      detail::cuda_mla_unfused_attention_block(*mla_unfused_, inv_freq_, step, w, cache,
                                               workspace, stream);
    else
      detail::cuda_mla_attention_block(options_, cluster_size_, inv_freq_, step, w, cache,
                                       workspace, stream);
#endif
    return;
  }
  check_host_positions(options_, step, batch);
  if (impl_ == DecodeImpl::kUnfused)
    reference_latent_attention_block(m, step, w, cache, options_.page_size);
  else
    split_latent_attention_block(m, step, w, cache, options_.page_size, cluster_size_);
}

}  // namespace tessera::decode
