// SpAttention: sequence-parallel attention as a model calls it, once per layer.
//
//   auto attn = sp::SpAttention::create(ctx, request);   // plan once (collective)
//   attn->run(q, k, v, o, stream);                        // every step (collective)
//
// create() plans the request with its method (planners.h; `auto` times every method with the
// sim executor), validates the plan (validator.h), allocates every buffer the plan needs
// (private device memory, and symmetric-heap memory for what peers read or write one-sided),
// creates its communicators, streams and events, and connects NCCL peers. It is collective
// over the context's ranks, which must all pass the same request.
//
// run() takes this rank's shards [B, L_r, H, D] (k, v: [B, L_r, Hkv, D]), where L_r =
// local_rows() and local row i holds the image token local_tokens() says (the plan's token
// layout: contiguous, striped or zigzag, over shard_size()'s sharding), and writes this rank's
// output shard. With joint tokens (J > 0) it also takes the replicated joint q, k, v
// [B, J, H|Hkv, D] and writes the joint output [B, J, H, D] on every rank. It enqueues the
// whole plan on `stream` without host synchronization or allocation (cuda: capturable in a
// CUDA graph; communication runs on the executor's own streams, forked from and joined back
// into `stream`). Tensors: the plan's dtype, the stream's device, unit stride in D (any other
// strides; the cuda attention kernels also want 16-byte aligned strides). Inputs must not be
// modified and outputs not read until the stream reaches the end of the run.
//
// The softmax scale defaults to 1 / sqrt(D).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"
#include "tessera/sp/planners.h"

namespace tessera::sp {

namespace detail {
class PlanExecutor;
}

struct SpAttentionOptions {
  std::optional<float> softmax_scale;  // unset: 1 / sqrt(head_dim)
  // Cost model terms for `auto` and Mesh's tile search ("key=value,..."; cost_model.h), on
  // top of CostModel::for_topology(context topology).
  std::string cost_overrides;
};

// When one step of a timed run (SpAttention::enable_timeline) began and ended on its stream, in
// microseconds from the start of the run on this rank (cuda: timing events; cpu: host clock).
// Compute steps the executor fused into one launch share its interval.
struct StepTiming {
  int step = 0;  // index in this rank's plan
  int stream = 0;
  double start_us = 0.0;
  double end_us = 0.0;
};

// The tensors of one run. Joint views stay empty when the plan has no joint tokens.
struct SpAttentionTensors {
  TensorView q, k, v, o;                          // [B, L_r, H|Hkv, D]
  TensorView joint_q, joint_k, joint_v, joint_o;  // [B, J, H|Hkv, D]
};

class SpAttention {
 public:
  // Collective over ctx's ranks. request.topology may be left empty (world_size 1 with no
  // links) to use ctx.topology; otherwise it must describe ctx's ranks.
  static std::unique_ptr<SpAttention> create(RankContext& ctx, const PlanRequest& request,
                                             const SpAttentionOptions& options = {});
  ~SpAttention();
  SpAttention(const SpAttention&) = delete;
  SpAttention& operator=(const SpAttention&) = delete;

  // Collective. No joint tokens.
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
           const Stream& stream);
  // Collective. With joint tokens.
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
           const TensorView& joint_q, const TensorView& joint_k, const TensorView& joint_v,
           const TensorView& joint_o, const Stream& stream);
  void run(const SpAttentionTensors& tensors, const Stream& stream);

  // Later runs record when each step begins and ends (for studying overlap: the events cost a
  // little, and a run with them should not be captured in a CUDA graph).
  void enable_timeline(bool on);
  // This rank's steps in the last run, in step order; waits for the run (bounded).
  std::vector<StepTiming> last_timeline() const;
  // How many attention launches one run issues on this rank (compute steps fused, see
  // src/sp/executor_fusion.h).
  int compute_launches() const;

  const Plan& plan() const;
  const AttentionShape& shape() const { return plan().shape; }
  int rank() const;
  // This rank's image tokens (global positions, joint tokens first) in local row order.
  const std::vector<TokenRun>& local_tokens() const { return local_tokens_; }
  // The same tokens as 0-based sequence indices (the joint tokens not counted), one per row.
  std::vector<int64_t> local_sequence_tokens() const;
  int64_t local_rows() const { return local_rows_; }
  float softmax_scale() const;
  void set_softmax_scale(float scale);
  // Device memory held: private (workspace slots, staging) and symmetric-heap bytes.
  size_t private_bytes() const;
  size_t symmetric_bytes() const;
  // One line: the plan's summary and the memory held.
  std::string describe() const;

 private:
  SpAttention() = default;
  void check_tensors(const SpAttentionTensors& t, const Stream& stream) const;

  RankContext* ctx_ = nullptr;
  std::unique_ptr<detail::PlanExecutor> executor_;
  std::vector<TokenRun> local_tokens_;
  int64_t local_rows_ = 0;
};

}  // namespace tessera::sp
