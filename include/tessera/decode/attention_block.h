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
struct UnfusedPlan;  // the cuda unfused path's cuBLASLt plans (src/decode/cuda/)
}

struct AttentionWeights {
  TensorView wq;          // [Hq*D, hidden]   (Hugging Face q_proj.weight)
  TensorView wk;          // [Hkv*D, hidden]  (k_proj.weight)
  TensorView wv;          // [Hkv*D, hidden]  (v_proj.weight)
  TensorView wo;          // [hidden, Hq*D]   (o_proj.weight)
  TensorView input_norm;  // [hidden] (input_layernorm.weight); empty: x is already normalized
};

// The KV cache of the batch, bf16 or fp16 like x.
//   contiguous: k, v [B, max_context, Hkv, D]
//   paged:      k, v [num_pages, page_size, Hkv, D] and page_table i32 [B, pages_per_seq]:
//               token t of sequence b is in page page_table[b][t / page_size] at row
//               t % page_size (vLLM's and FlashInfer's NHD layout).
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

// kAuto: fused where the fused kernel takes the shape (head_dim 128, 1/2/4/8 query heads per
// KV head, hidden a multiple of 128), else unfused. kUnfused: cuBLASLt projections, a RoPE and
// cache-append kernel and split-KV attention (cuda); the float64 reference (cpu).
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
  // Device memory run() needs as `workspace` (per-cluster output partials).
  size_t workspace_bytes() const;

  // One decode step for step.x.size(0) <= max_batch sequences. Validates shapes, dtypes and
  // devices against the plan; positions are read on the device (cpu: checked against
  // max_context and the page table, cuda: the kernel traps on an out-of-range page index).
  void run(const DecodeStep& step, const AttentionWeights& weights, const KvCache& cache,
           const TensorView& workspace, const Stream& stream) const;

  std::string describe() const;  // "llama2-7b fused cluster 4 bf16 contiguous"

 private:
  AttentionBlockOptions options_;
  DecodeImpl impl_ = DecodeImpl::kFused;
  int cluster_size_ = 1;
  std::string cluster_source_ = "given";  // "given", "tuned" or "cost model"
  std::vector<float> inv_freq_;  // RoPE's, computed once here so run() allocates nothing
  std::shared_ptr<detail::UnfusedPlan> unfused_;  // set when the cuda plan runs unfused
};

}  // namespace tessera::decode
