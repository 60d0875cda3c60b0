// SpAttention: plan once, run per layer (see attention_layer.h). Planning, validation and
// argument checks live here; executing a plan is PlanExecutor's (executor.h).
#include "tessera/sp/attention_layer.h"

#include <cmath>

#include "executor.h"
#include "tessera/attn/attention.h"
#include "tessera/core/error.h"
#include "tessera/sp/validator.h"

namespace tessera::sp {

std::unique_ptr<SpAttention> SpAttention::create(RankContext& ctx, const PlanRequest& request,
                                                 const SpAttentionOptions& options) {
  TESSERA_CHECK_ARG(ctx.world != nullptr, "ctx (rank ", ctx.rank,
                    ") has no world communicator: expected a context from create_cuda_context "
                    "or run_cpu_ranks");
  PlanRequest req = request;
  if (req.topology.links.empty()) {
    req.topology = ctx.topology;
  } else {
    TESSERA_CHECK_ARG(req.topology.world_size == ctx.size,
                      "request.topology.world_size = ", req.topology.world_size,
                      ": expected the context's ", ctx.size,
                      " ranks (or leave the topology empty to use the context's)");
  }
  const AttentionShape shape = req.shape();  // validates the request
  if (ctx.backend == Backend::kCuda) {
    TESSERA_CHECK(shape.dtype == DType::kBF16 || shape.dtype == DType::kF16,
                  ErrorCode::kUnsupported, "dtype = ", dtype_name(shape.dtype),
                  ": the cuda attention kernels take bf16 or f16");
    TESSERA_CHECK(shape.head_dim == 64 || shape.head_dim == 128 || shape.head_dim == 256,
                  ErrorCode::kUnsupported, "head_dim = ", shape.head_dim,
                  ": the cuda attention kernels take 64, 128 or 256");
  }
  const float scale = options.softmax_scale.value_or(attn::default_softmax_scale(shape.head_dim));
  TESSERA_CHECK_ARG(std::isfinite(scale) && scale > 0, "options.softmax_scale = ", scale,
                    ": expected a finite value > 0");
  CostModel model = CostModel::for_topology(req.topology);
  model.apply(options.cost_overrides);
  model.validate();

  Plan plan = make_plan(req, model);
  check_plan(plan);

  std::unique_ptr<SpAttention> layer(new SpAttention());
  layer->ctx_ = &ctx;
  layer->local_tokens_ =
      owned_image_tokens(plan.layout, shape.seq_len, shape.joint_tokens, plan.world_size, ctx.rank);
  layer->local_rows_ = run_rows(layer->local_tokens_);
  layer->executor_ = std::make_unique<detail::PlanExecutor>(ctx, std::move(plan), scale);
  return layer;
}

SpAttention::~SpAttention() = default;

std::vector<int64_t> SpAttention::local_sequence_tokens() const {
  const int64_t joint = shape().joint_tokens;
  std::vector<int64_t> tokens;
  tokens.reserve(size_t(local_rows_));
  for (const TokenRun& run : local_tokens_)
    for (int64_t i = 0; i < run.count; ++i) tokens.push_back(run.at(i) - joint);
  return tokens;
}

const Plan& SpAttention::plan() const {
  return executor_->plan();
}

void SpAttention::enable_timeline(bool on) {
  executor_->enable_timeline(on);
}

std::vector<StepTiming> SpAttention::last_timeline() const {
  return executor_->last_timeline();
}

int SpAttention::compute_launches() const {
  return int(executor_->compute_launches().launches.size());
}

int SpAttention::rank() const {
  return executor_->rank();
}

float SpAttention::softmax_scale() const {
  return executor_->softmax_scale();
}

void SpAttention::set_softmax_scale(float scale) {
  TESSERA_CHECK_ARG(std::isfinite(scale) && scale > 0, "softmax_scale = ", scale,
                    ": expected a finite value > 0");
  executor_->set_softmax_scale(scale);
}

size_t SpAttention::private_bytes() const {
  return executor_->private_bytes();
}

size_t SpAttention::symmetric_bytes() const {
  return executor_->symmetric_bytes();
}

std::string SpAttention::describe() const {
  return str(plan().summary(), "; rank ", rank(), " holds ", private_bytes(), " private and ",
             symmetric_bytes(), " symmetric bytes");
}

void SpAttention::run(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& o, const Stream& stream) {
  run(SpAttentionTensors{q, k, v, o, {}, {}, {}, {}}, stream);
}

void SpAttention::run(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& o, const TensorView& joint_q, const TensorView& joint_k,
                      const TensorView& joint_v, const TensorView& joint_o, const Stream& stream) {
  run(SpAttentionTensors{q, k, v, o, joint_q, joint_k, joint_v, joint_o}, stream);
}

void SpAttention::run(const SpAttentionTensors& t, const Stream& stream) {
  check_tensors(t, stream);
  executor_->run({t.q, t.k, t.v, t.o, t.joint_q, t.joint_k, t.joint_v, t.joint_o}, stream);
}

void SpAttention::check_tensors(const SpAttentionTensors& t, const Stream& stream) const {
  const AttentionShape& s = shape();
  const RankContext& ctx = *ctx_;
  TESSERA_CHECK_ARG(stream.backend() == ctx.backend, "stream is a ", backend_name(stream.backend()),
                    " stream: expected a ", backend_name(ctx.backend),
                    " stream (the context's backend)");
  const Device device = ctx.backend == Backend::kCuda ? ctx.device : Device::cpu();
  if (ctx.backend == Backend::kCuda) {
    TESSERA_CHECK_ARG(stream.device() == device, "stream is on ", stream.device().to_string(),
                      ": expected ", device.to_string(), " (rank ", ctx.rank, "'s device)");
  }
  const std::string layout = token_layout_name(plan().layout);
  auto check = [&](const TensorView& x, const char* name, int64_t rows, int heads,
                   const char* rows_name) {
    TESSERA_CHECK_ARG(x.ndim() == 4 && x.size(0) == s.batch && x.size(1) == rows &&
                          x.size(2) == heads && x.size(3) == s.head_dim,
                      name, " = ", x.empty() ? std::string("(empty)") : x.to_string(),
                      ": expected [", s.batch, ", ", rows, ", ", heads, ", ", s.head_dim, "] [B, ",
                      rows_name, ", heads, D] for ", s.to_string(), " on rank ", ctx.rank, " of ",
                      plan().world_size, " (", layout, " layout)");
    TESSERA_CHECK_ARG(x.dtype() == s.dtype, name, " has dtype ", dtype_name(x.dtype()),
                      ": expected ", dtype_name(s.dtype), " (the plan's)");
    TESSERA_CHECK_ARG(x.device() == device, name, " = ", x.to_string(), " is on ",
                      x.device().to_string(), ": expected ", device.to_string());
    TESSERA_CHECK_ARG(x.stride(3) == 1 || s.head_dim == 1, name, " = ", x.to_string(),
                      " has stride ", x.stride(3), " in D: expected 1");
    TESSERA_CHECK_ARG(x.numel() == 0 || x.data() != nullptr, name, " = ", x.to_string(),
                      ": data is null");
  };
  check(t.q, "q", local_rows_, s.heads, "L_r");
  check(t.k, "k", local_rows_, s.kv_heads, "L_r");
  check(t.v, "v", local_rows_, s.kv_heads, "L_r");
  check(t.o, "o", local_rows_, s.heads, "L_r");
  if (s.joint_tokens > 0) {
    check(t.joint_q, "joint_q", s.joint_tokens, s.heads, "J");
    check(t.joint_k, "joint_k", s.joint_tokens, s.kv_heads, "J");
    check(t.joint_v, "joint_v", s.joint_tokens, s.kv_heads, "J");
    check(t.joint_o, "joint_o", s.joint_tokens, s.heads, "J");
  } else {
    for (const auto& [x, name] :
         {std::pair{t.joint_q, "joint_q"}, std::pair{t.joint_k, "joint_k"},
          std::pair{t.joint_v, "joint_v"}, std::pair{t.joint_o, "joint_o"}}) {
      TESSERA_CHECK_ARG(x.empty() && x.ndim() == 0, name, " = ", x.to_string(),
                        ": expected an empty view (the plan has no joint tokens)");
    }
  }
}

}  // namespace tessera::sp
