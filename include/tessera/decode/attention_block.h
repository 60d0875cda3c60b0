// The attention block of one decode step (ClusterFusion): input RMSNorm (optional), QKV
// projection, RoPE, appending the new K and V to the cache, attention over the cache, and the
// output projection, for a batch of sequences that each add one token.
//
//   xn_b   = rmsnorm(x_b) * input_norm               (or x_b when input_norm is empty)
//   q_b,h  = rope(Wq_h xn_b, p_b)   k_b,g = rope(Wk_g xn_b, p_b)   v_b,g = Wv_g xn_b
//   cache_g[b][p_b] = (k_b,g, v_b,g)                 p_b = positions[b], the tokens already cached
//   o_b,h  = softmax(q_b,h . K_b,g(h)[0..p_b] / sqrt(D)) V_b,g(h)[0..p_b]     g(h) = h / (Hq/Hkv)
//   out_b  = sum_h Wo[:, h] o_b,h
//
// RoPE rotates halves (Hugging Face's rotate_half): (x_i, x_{i+D/2}) by p * inv_freq_i.
//
// Multi-head latent attention (AttentionKind::kLatent, DeepSeek-V2-Lite), decoded with the
// absorbed weights as SGLang and vLLM run it. H heads, R = kv_lora_rank, Dn = nope_head_dim,
// Dr = rope_head_dim, Dv = v_head_dim; W_UK_h = rows [h*(Dn+Dv), h*(Dn+Dv)+Dn) of Wkv_b and
// W_UV_h the Dv rows after them:
//
//   xn_b       = rmsnorm(x_b) * input_norm            (or x_b when input_norm is empty)
//   [qn_b,h, qr_b,h] = Wq_h xn_b                       qn: Dn, qr: Dr per head
//   [c_b, kr_b]      = Wkv_a xn_b                      c: R, kr: Dr (shared by every head)
//   c_b = rmsnorm(c_b) * kv_a_norm    qr_b,h = rope(qr_b,h, p_b)    kr_b = rope(kr_b, p_b)
//   cache[b][p_b] = [c_b, kr_b]                         one latent row of R + Dr per token
//   ql_b,h = W_UK_h^T qn_b,h                            (R: the absorbed query)
//   s_t    = (ql_b,h . c_t + qr_b,h . kr_t) / sqrt(Dn + Dr)          t = 0..p_b
//   o_b,h  = W_UV_h sum_t softmax(s)_t c_t                           (Dv)
//   out_b  = Wo [o_b,0, ..., o_b,H-1]
//
// which equals ordinary attention over the decompressed keys [W_UK_h c_t, kr_t] and values
// W_UV_h c_t. RoPE pairs interleaved dimensions (x_{2i}, x_{2i+1}) by p * inv_freq_i over Dr
// (vLLM's non-neox rotary; Hugging Face's DeepseekV2 de-interleaves first, the same scores).
// Not modelled: DeepSeek-V2-Lite's yarn RoPE scaling (its frequency ramp and the mscale factor
// on the softmax scale): rope_inv_freq is the unscaled theta^(-2i/Dr). kLatent plans run the
// fused MLA dataflow (a cluster a query head, src/decode/split_geometry.h): on cuda its kernel
// (kernels/decode/mla_sm90.cuh), on the cpu its float32 emulation; unfused, on cuda cuBLASLt
// projections around MLA split-KV attention (kernels/decode/mla_unfused_launch.h), on the cpu
// the float64 reference (src/decode/latent_reference.h).
//
// Fused dataflow (cuda, kernels/decode/): one thread-block cluster per KV head, so K and V
// are read once for the group's query heads. CTA r of N takes the hidden slice
// [r*hidden/N, (r+1)*hidden/N) of the QKV projection and the cluster adds the partials with
// ClusterReduce; CTA r takes sequence slice r of each sequence's cache for attention and the
// cluster merges the softmax partials with ClusterReduce; CTA r takes output rows
// [r*hidden/N, (r+1)*hidden/N) of the output projection and writes a per-cluster partial,
// which a second kernel adds over the clusters in a fixed order. No atomics: the output is
// bitwise the same from run to run. The cpu backend runs the same split in float32
// (src/decode/split_emulation.h) and a float64 reference (src/decode/reference.h) checks both.
//
// Plan once (model, batch and context bounds, KV layout, device), then run() per step on a
// stream: run() neither allocates, synchronizes nor encodes descriptors (the kernel reads the
// step's pointers as they are), so it can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor_view.h"
#include "tessera/decode/model_config.h"
#include "tessera/runtime/stream.h"

namespace tessera::decode {

namespace detail {
struct UnfusedPlan;     // the cuda unfused path's cuBLASLt plans (src/decode/cuda/)
struct MlaUnfusedPlan;  // the same for MLA
}

struct AttentionWeights {
  TensorView wq;          // [Hq*D, hidden]   (Hugging Face q_proj.weight)
  TensorView wk;          // [Hkv*D, hidden]  (k_proj.weight)
  TensorView wv;          // [Hkv*D, hidden]  (v_proj.weight)
  TensorView wo;          // [hidden, Hq*D]   (o_proj.weight)
  TensorView input_norm;  // [hidden] (input_layernorm.weight); empty: x is already normalized
};

// The weights of an MLA block (AttentionKind::kLatent), Hugging Face's DeepseekV2 layouts.
struct LatentAttentionWeights {
  TensorView wq;          // [H*(Dn+Dr), hidden] (q_proj.weight): head h's Dn, then its Dr rows
  TensorView wkv_a;       // [R+Dr, hidden]      (kv_a_proj_with_mqa.weight): c, then kr
  TensorView kv_a_norm;   // [R]                 (kv_a_layernorm.weight)
  TensorView wkv_b;       // [H*(Dn+Dv), R]      (kv_b_proj.weight): head h's W_UK_h, then W_UV_h
  TensorView wo;          // [hidden, H*Dv]      (o_proj.weight)
  TensorView input_norm;  // [hidden] (input_layernorm.weight); empty: x is already normalized
};

// The KV cache of the batch, bf16 or fp16 like x.
//   contiguous: k, v [B, max_context, Hkv, D]
//   paged:      k, v [num_pages, page_size, Hkv, D] and page_table i32 [B, pages_per_seq]:
//               token t of sequence b is in page page_table[b][t / page_size] at row
//               t % page_size (vLLM's and FlashInfer's NHD layout).
// MLA (kLatent): k is the latent cache, [B, max_context, 1, R+Dr] or [num_pages, page_size, 1,
// R+Dr] (a row is [c, kr]), and v is empty: the values are the latent rows' first R entries.
struct KvCache {
  TensorView k;
  TensorView v;
  TensorView page_table;  // empty: contiguous
};

struct DecodeStep {
  TensorView x;          // [B, hidden] the new tokens' hidden states
  TensorView positions;  // i32 [B] on the device: p_b, the tokens already cached for sequence b
  TensorView out;        // [B, hidden] the block's output, x's dtype
};

// kAuto: on cuda, the fused kernel where it takes the shape (head_dim 128, 1/2/4/8 query heads
// per KV head, hidden a multiple of 128) and measured faster than the unfused path (one query
// head per KV head, batch 1, contexts up to 4096: docs/PERF.md, "Split-KV decode on tensor
// cores"), else unfused; MLA plans unfused. On cpu, fused where it takes the shape. kUnfused:
// cuBLASLt projections, a RoPE and cache-append kernel and split-KV attention (cuda); the
// float64 reference (cpu).
enum class DecodeImpl { kAuto, kFused, kUnfused };

struct AttentionBlockOptions {
  ModelConfig model;
  int64_t max_batch = 1;
  int64_t max_context = 4096;  // the largest p_b + 1 run() may see
  DType dtype = DType::kBF16;  // of x, weights, cache and out (bf16 or fp16; cpu: also f32)
  bool paged = false;
  int64_t page_size = 16;
  Device device = Device::cpu();
  DecodeImpl impl = DecodeImpl::kAuto;
  int cluster_size = 0;  // 0: the tuned table for this GPU and shape (tune_table.h), else the
                         // cost model: the largest that keeps every cluster in one wave
};

class AttentionBlock {
 public:
  // Validates the options (kInvalidArgument / kUnsupported naming the option) and plans.
  explicit AttentionBlock(const AttentionBlockOptions& options);

  const AttentionBlockOptions& options() const { return options_; }
  int cluster_size() const { return cluster_size_; }
  DecodeImpl impl() const { return impl_; }
  // Device memory run() needs as `workspace` (per-cluster output partials, per query head for
  // MLA; 0 on the cpu for MLA plans).
  size_t workspace_bytes() const;

  // One decode step for step.x.size(0) <= max_batch sequences. Validates shapes, dtypes and
  // devices against the plan; positions are read on the device (cpu: checked against
  // max_context and the page table, cuda: the kernel traps on an out-of-range page index).
  void run(const DecodeStep& step, const AttentionWeights& weights, const KvCache& cache,
           const TensorView& workspace, const Stream& stream) const;
  // The same for an MLA plan (model.kind == kLatent). Each run() refuses the
  // other kind's weights, naming `weights`. A braced list of five weights matches both
  // overloads: name the struct (AttentionWeights{...}).
  void run(const DecodeStep& step, const LatentAttentionWeights& weights, const KvCache& cache,
           const TensorView& workspace, const Stream& stream) const;

  std::string describe() const;  // "llama2-7b fused cluster 4 bf16 contiguous"

 private:
  AttentionBlockOptions options_;
  DecodeImpl impl_ = DecodeImpl::kFused;
  int cluster_size_ = 1;
  std::string cluster_source_ = "given";  // "given", "tuned" or "cost model"
  std::vector<float> inv_freq_;  // RoPE's, computed once here so run() allocates nothing
  std::shared_ptr<detail::UnfusedPlan> unfused_;  // set when the cuda plan runs unfused
  std::shared_ptr<detail::MlaUnfusedPlan> mla_unfused_;  // the same for MLA
};

}  // namespace tessera::decode
