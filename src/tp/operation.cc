// TpOperation: construction (buffers), argument checks, dispatch to the fused protocol or the
// unfused pair.
#include "tessera/tp/operation.h"

#include <algorithm>

#include "operation_impl.h"
#include "tessera/comm/agreement.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/build_info.h"
#include "tessera/sp/cost_model.h"
#include "tp/tp_backend.h"

namespace tessera::tp {

namespace {

void check_matrix(const TensorView& t, int64_t rows, int64_t cols, DType dtype, Device device,
                  const char* what, const char* meaning) {
  TESSERA_CHECK_ARG(!t.empty() || rows * cols == 0, what, ": expected ", dtype_name(dtype), "[",
                    rows, ", ", cols, "] (", meaning, "), got an empty view");
  if (t.empty()) return;
  TESSERA_CHECK_ARG(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, what, " = ",
                    t.to_string(), ": expected shape [", rows, ", ", cols, "] (", meaning, ")");
  check_dtype(t, dtype, what);
  check_device(t, device, what);
  check_contiguous(t, what);
}

}  // namespace

std::string fused_unsupported_reason(const TpPlan& plan, Backend backend) {
  if (!plan.fused || backend != Backend::kCuda) return {};
#ifdef TESSERA_WITH_CUDA
  try {
    detail::check_cuda_fused_supported(plan);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    return e.what();
  }
  return {};
#else
  return "this build has no cuda backend";
#endif
}

TpPlan plan_for_context(const RankContext& ctx, TpRequest request, TpPlanOptions options) {
  request.world_size = ctx.size;
  request.num_machines = ctx.topology.num_machines();
  options.num_signal_slots = ctx.heap ? ctx.heap->num_signal_slots() : 1024;
  options.tuned_gpu = device_name(ctx.device);
  TpPlan plan = plan_tp(request, ctx.topology, sp::CostModel::for_topology(ctx.topology), options);
  if (options.fuse == TpPlanOptions::Fuse::kAuto) {
    // The cost model knows no backend: where this one cannot run the fused form, the pick is
    // the unfused pair.
    if (const std::string why = fused_unsupported_reason(plan, ctx.backend); !why.empty()) {
      plan.fused = false;
      plan.reason += "; unfused: " + why;
    }
  }
  return plan;
}

TpOperation::Impl::Impl(RankContext& context, const TpPlan& p) : ctx(context), plan(p) {
  rank = ctx.rank;
  world = ctx.size;
  const TpRequest& r = plan.request;
  TESSERA_CHECK_ARG(r.world_size == world, "plan.request.world_size = ", r.world_size,
                    ": expected the context's ", world, " ranks");
  const int machines = ctx.topology.num_machines();
  TESSERA_CHECK_ARG(r.num_machines == machines, "plan.request.num_machines = ", r.num_machines,
                    ": expected the context's ", machines, " machines");
  gpus_per_machine = world / machines;
  if (plan.fused) {
    TESSERA_CHECK_ARG(ctx.heap != nullptr,
                      "plan.fused = true: expected a context with a symmetric heap");
  }
  validate_plan(plan, ctx.heap ? ctx.heap->num_signal_slots() : 0);
  // On GPUs the fused operations run inside one machine.
  if (plan.fused && ctx.backend == Backend::kCuda) {
#ifdef TESSERA_WITH_CUDA
    detail::check_cuda_fused_supported(plan);
#endif
  }
  shapes = rank_shapes(r, rank);
  if (plan.fused)
    signals = SignalSlots(*ctx.heap, num_signal_slots(plan), "tensor-parallel operation");
  check_same_plan_everywhere();
  if (plan.fused) allocate_fused();
#ifdef TESSERA_WITH_CUDA
  if (ctx.backend == Backend::kCuda) {
    if (!plan.fused)
      cuda_runner = detail::make_cuda_unfused_pair(ctx, plan);
    else if (r.op == TpOp::kAllGatherGemm)
      cuda_runner = detail::make_cuda_fused_all_gather(ctx, plan, gathered, signals.base());
    else if (r.op == TpOp::kGemmReduceScatter)
      cuda_runner = detail::make_cuda_fused_reduce_scatter(ctx, plan, partials, signals.base());
    else
      cuda_runner = detail::make_cuda_fused_all_to_all(ctx, plan, received, signals.base());
    return;
  }
#endif
  if (!plan.fused) allocate_unfused();
}

void TpOperation::Impl::check_same_plan_everywhere() {
  if (world == 1) return;
  // The reason is for people and may differ in wording; what runs may not.
  TpPlan bare = plan;
  bare.reason.clear();
  const uint64_t mine[2] = {fingerprint(plan_to_json(bare)), uint64_t(int64_t(signals.base()))};
  const std::vector<uint64_t> all = all_gather_words(ctx, mine);
  for (int r = 0; r < world; ++r) {
    TESSERA_CHECK_ARG(all[2 * r] == mine[0], "rank ", rank, ": rank ", r, " planned a different ",
                      tp_op_name(plan.request.op), " operation (fingerprint ", all[2 * r], " vs ",
                      mine[0], "): every rank must construct TpOperation with the same plan");
    TESSERA_CHECK_ARG(all[2 * r + 1] == mine[1], "rank ", rank, ": rank ", r,
                      " got signal slots from ", int64_t(all[2 * r + 1]), " but this rank from ",
                      int64_t(mine[1]),
                      ": every rank must create and destroy its operations in the same order");
  }
}

namespace {

// ceil(M / P): the padded share of the collectives.
int64_t padded_share(const TpRequest& r) {
  return (r.m + r.world_size - 1) / r.world_size;
}

}  // namespace

int64_t TpOperation::Impl::max_share() const {
  return padded_share(plan.request);
}

gemm::detail::WeightOperand TpOperation::Impl::weight(const TensorView& b) const {
  const TpRequest& r = plan.request;
  const int64_t k = r.op == TpOp::kGemmReduceScatter ? r.k / world : r.k;
  const int64_t n = r.op == TpOp::kAllGatherGemm ? r.n / world : r.n;
  return {b.data(), r.dtype, r.weight_layout == WeightLayout::kNK, k, n};
}

void TpOperation::Impl::compute_tile(const void* a_rows, int64_t lda, const TileTask& tile,
                                     const TensorView& b, const void* bias, void* dst,
                                     int64_t ldd) {
  acc.resize(size_t(tile.rows * tile.cols));
  gemm::detail::gemm_tile(a_rows, lda, plan.request.dtype, tile.rows, weight(b), tile.col_begin,
                    tile.cols, gemm_scratch, acc.data());
  gemm::detail::store_tile(acc.data(), tile.rows, tile.cols, bias, tile.col_begin, plan.request.out_dtype,
                     dst, ldd);
}

namespace {

// The fused operation's symmetric buffers (Impl's members of the same names), in bytes; 0 for a
// buffer the plan does not use, at least 1 for one it does (so every buffer has an address).
struct FusedBufferBytes {
  size_t gathered = 0, partials = 0, relay_partials = 0, received = 0;
};

FusedBufferBytes fused_buffer_bytes(const TpPlan& plan) {
  const TpRequest& r = plan.request;
  const size_t in_elem = dtype_size(r.dtype), out_elem = dtype_size(r.out_dtype);
  const size_t p = size_t(r.world_size), share = size_t(padded_share(r));
  auto at_least_one = [](size_t bytes) { return std::max<size_t>(bytes, 1); };
  FusedBufferBytes b;
  switch (r.op) {
    case TpOp::kAllGatherGemm:
      b.gathered = at_least_one(size_t(r.m) * size_t(r.k) * in_elem);
      break;
    case TpOp::kGemmReduceScatter:
      b.partials = at_least_one(p * share * size_t(r.n) * out_elem);
      if (plan.two_level) b.relay_partials = b.partials;
      break;
    case TpOp::kGemmAllToAll:
      b.received = at_least_one(size_t(r.m) * size_t(r.n / r.world_size) * out_elem);
      break;
  }
  return b;
}

}  // namespace

size_t fused_symmetric_bytes(const TpPlan& plan) {
  if (!plan.fused) return 0;
  const FusedBufferBytes b = fused_buffer_bytes(plan);
  return b.gathered + b.partials + b.relay_partials + b.received;
}

void TpOperation::Impl::allocate_fused() {
  SymmetricHeap& heap = *ctx.heap;
  const FusedBufferBytes b = fused_buffer_bytes(plan);
  // Collective: every rank allocates the same sizes in the same order.
  if (b.gathered) gathered = heap.allocate(b.gathered);
  if (b.partials) partials = heap.allocate(b.partials);
  if (b.relay_partials) relay_partials = heap.allocate(b.relay_partials);
  if (b.received) received = heap.allocate(b.received);
}

TpOperation::TpOperation(RankContext& ctx, const TpPlan& plan)
    : impl_(std::make_unique<Impl>(ctx, plan)) {}
TpOperation::~TpOperation() {
  if (!impl_ || !impl_->ctx.heap) return;
#ifdef TESSERA_WITH_CUDA
  impl_->cuda_runner.reset();
#endif
  // Like the construction, every rank drops its operations in the same order.
  try {
    for (const SymmetricBuffer* b :
         {&impl_->received, &impl_->relay_partials, &impl_->partials, &impl_->gathered})
      impl_->ctx.heap->release(*b);
  } catch (const Error& e) {
    TESSERA_LOG(kWarn, "TpOperation: its symmetric buffers were not released: ", e.what());
  }
}

const TpPlan& TpOperation::plan() const {
  return impl_->plan;
}
RankShapes TpOperation::shapes() const {
  return impl_->shapes;
}

void TpOperation::time_phases(bool on) {
#ifdef TESSERA_WITH_CUDA
  if (impl_->cuda_runner) impl_->cuda_runner->phases().enable(on);
#endif
  (void)on;
}

std::vector<TpPhase> TpOperation::phases() const {
#ifdef TESSERA_WITH_CUDA
  if (impl_->cuda_runner) return impl_->cuda_runner->phases().read();
#endif
  return {};
}

void TpOperation::run(const TensorView& a, const TensorView& b, const TensorView& bias,
                      const TensorView& out, const Stream& stream) {
  Impl& im = *impl_;
  const TpRequest& r = im.plan.request;
  const RankShapes& s = im.shapes;
  const Device device = im.ctx.device;
  check_matrix(a, s.a_rows, s.a_cols, r.dtype, device, "a",
               r.op == TpOp::kGemmReduceScatter ? "all rows, this rank's K/P input features"
                                                : "this rank's rows, K input features");
  check_matrix(b, s.b_rows, s.b_cols, r.dtype, device, "b",
               r.weight_layout == WeightLayout::kKN ? "the weight shard as [K, N]"
                                                    : "the weight shard as [N, K]");
  check_matrix(out, s.out_rows, s.out_cols, r.out_dtype, device, "out",
               r.op == TpOp::kGemmReduceScatter ? "this rank's rows, N output features"
                                                : "all rows, this rank's N/P output features");
  if (r.has_bias) {
    TESSERA_CHECK_ARG(!bias.empty(), "bias: expected ", dtype_name(r.out_dtype), "[", s.bias,
                      "] (the plan has a bias), got an empty view");
    TESSERA_CHECK_ARG(bias.ndim() == 1 && bias.size(0) == s.bias, "bias = ", bias.to_string(),
                      ": expected shape [", s.bias, "]");
    check_dtype(bias, r.out_dtype, "bias");
    check_device(bias, device, "bias");
    check_contiguous(bias, "bias");
  } else {
    TESSERA_CHECK_ARG(bias.empty(), "bias = ", bias.to_string(),
                      ": expected an empty view (the plan has no bias)");
  }
  TESSERA_CHECK_ARG(stream.backend() == im.ctx.backend, "stream: a ",
                    backend_name(stream.backend()), " stream, expected a ",
                    backend_name(im.ctx.backend), " stream");
  const RunArgs args{a, b, bias, out, stream};
#ifdef TESSERA_WITH_CUDA
  if (im.cuda_runner) return im.cuda_runner->run(a, b, bias, out, stream);
#endif
  if (!im.plan.fused) return im.run_unfused(args);
  switch (r.op) {
    case TpOp::kAllGatherGemm:
      return im.run_fused_all_gather(args);
    case TpOp::kGemmReduceScatter:
      return im.run_fused_reduce_scatter(args);
    case TpOp::kGemmAllToAll:
      return im.run_fused_all_to_all(args);
  }
}

}  // namespace tessera::tp
