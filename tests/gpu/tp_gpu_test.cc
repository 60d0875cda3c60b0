// Tensor-parallel operations on the cuda backend: the unfused pairs (cuBLASLt and NCCL) on
// every visible GPU (up to 4; one rank on a one-GPU machine) against the float64 reference:
// every op, both weight layouts, with and without bias, M not a multiple of the ranks, bf16 and
// f16 in, bf16/f32 out; the fused AllGather+GEMM (copy-engine pushes, the GEMM waiting per row
// tile) with whole and chunked shards, M of one row, not a multiple of the tile or the ranks,
// three calls in a row giving bitwise the same output; the fused GEMM+ReduceScatter and
// GEMM+AllToAll likewise; what is not built on cuda refused; the three fused ops called back to
// back with ranks stalled in turn (no buffer overwritten early).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "dist/tp_test_util.h"
#include "gpu_workers.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/tp/operation.h"

namespace tessera::testing {
namespace {

int num_gpus_for_test() {
  return gpus_for_test(4);
}

TEST(TpGpu, UnfusedPairsMatchTheReference) {
  TESSERA_REQUIRE_GPUS(num_gpus_for_test(), 1);
  run_gpu_workers("TpGpuWorker", "UnfusedPairsMatchTheReference", num_gpus_for_test(), 60000);
}

TEST(TpGpu, FusedGemmReduceScatterMatchesTheReference) {
  TESSERA_REQUIRE_GPUS(num_gpus_for_test(), 1);
  run_gpu_workers("TpGpuWorker", "FusedGemmReduceScatterMatchesTheReference", num_gpus_for_test(),
                  60000);
}

TEST(TpGpu, FusedGemmAllToAllMatchesTheReference) {
  TESSERA_REQUIRE_GPUS(num_gpus_for_test(), 1);
  run_gpu_workers("TpGpuWorker", "FusedGemmAllToAllMatchesTheReference", num_gpus_for_test(),
                  60000);
}

TEST(TpGpu, FusedAllGatherGemmMatchesTheReference) {
  TESSERA_REQUIRE_GPUS(num_gpus_for_test(), 1);
  run_gpu_workers("TpGpuWorker", "FusedAllGatherGemmMatchesTheReference", num_gpus_for_test(),
                  60000);
}

TEST(TpGpu, FusedOperationsBackToBackWithSkewedRanks) {
  TESSERA_REQUIRE_GPUS(num_gpus_for_test(), 2);
  run_gpu_workers("TpGpuWorker", "FusedOperationsBackToBackWithSkewedRanks", num_gpus_for_test(),
                  60000);
}

// ---------------------------------------------------------------------------------------------
// Worker side

// A call's operands and output on this GPU.
struct DeviceCall {
  const TpProblem* problem = nullptr;
  Buffer a, b, bias, out;
};

DeviceCall upload_call(const tp::TpOperation& op, const TpProblem& problem, RankContext& ctx) {
  const tp::TpRequest& r = op.plan().request;
  const tp::RankShapes s = op.shapes();
  auto upload = [&](const std::vector<std::byte>& host) {
    if (host.empty()) return Buffer();  // e.g. a rank with no rows: a null view
    Buffer buffer = Buffer::allocate(host.size(), ctx.device);
    EXPECT_EQ(cudaMemcpy(buffer.data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    return buffer;
  };
  DeviceCall call;
  call.problem = &problem;
  call.a = upload(problem.a(ctx.rank));
  call.b = upload(problem.b(ctx.rank));
  call.bias = upload(problem.bias(ctx.rank));
  const size_t out_bytes = size_t(s.out_rows * s.out_cols) * dtype_size(r.out_dtype);
  call.out = Buffer::allocate(out_bytes, ctx.device);
  EXPECT_EQ(cudaMemset(call.out.data(), 0xff, out_bytes), cudaSuccess);  // NaN in every dtype
  return call;
}

// Enqueues `call` on the context's stream.
void run_call(tp::TpOperation& op, const DeviceCall& call, RankContext& ctx) {
  const tp::TpRequest& r = op.plan().request;
  const tp::RankShapes s = op.shapes();
  op.run(TensorView(call.a.data(), r.dtype, ctx.device, {s.a_rows, s.a_cols}),
         TensorView(call.b.data(), r.dtype, ctx.device, {s.b_rows, s.b_cols}),
         r.has_bias ? TensorView(call.bias.data(), r.out_dtype, ctx.device, {s.bias}) : TensorView(),
         TensorView(call.out.data(), r.out_dtype, ctx.device, {s.out_rows, s.out_cols}), ctx.stream);
}

// The output of `call`, copied back.
std::vector<std::byte> download_output(const DeviceCall& call) {
  std::vector<std::byte> host(call.out.bytes());
  EXPECT_EQ(cudaMemcpy(host.data(), call.out.data(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// A worker's context on its GPU, with a symmetric heap of `heap_bytes`.
std::unique_ptr<RankContext> worker_context(size_t heap_bytes) {
  ContextOptions options;
  options.heap_bytes = heap_bytes;
  return create_cuda_context(bootstrap_from_launch(detect_launch()), options);
}

// Waits for every rank, then ends the worker with the test's verdict.
[[noreturn]] void end_worker(RankContext& ctx) {
  ctx.bootstrap->barrier();
  std::fflush(stdout);
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
}

std::vector<std::byte> run_on_gpu(tp::TpOperation& op, const TpProblem& problem, RankContext& ctx) {
  const DeviceCall call = upload_call(op, problem, ctx);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // before op.run's stream reads it
  run_call(op, call, ctx);
  ctx.world->synchronize(ctx.stream);
  return download_output(call);
}

// One more call with its phases timed (bench tp --phases): each of `names` reported once, at
// a finite time >= 0, the first `ordered` of them in stream order (each no later than the next:
// they end on one stream, or on streams the next one's joined).
void expect_phases(tp::TpOperation& op, const TpProblem& problem, RankContext& ctx,
                   const std::vector<std::string>& names, size_t ordered) {
  op.time_phases(true);
  (void)run_on_gpu(op, problem, ctx);
  const std::vector<tp::TpPhase> phases = op.phases();
  op.time_phases(false);
  std::vector<double> at;
  for (const std::string& name : names) {
    const auto n = std::count_if(phases.begin(), phases.end(),
                                 [&](const tp::TpPhase& phase) { return phase.name == name; });
    EXPECT_EQ(n, 1) << "rank " << ctx.rank << ": phase '" << name << "'";
    const auto it = std::find_if(phases.begin(), phases.end(),
                                 [&](const tp::TpPhase& phase) { return phase.name == name; });
    at.push_back(it == phases.end() ? -1.0 : it->us);
    EXPECT_TRUE(std::isfinite(at.back()) && at.back() >= 0) << name << ": " << at.back();
  }
  for (size_t i = 1; i < ordered && i < at.size(); ++i)
    EXPECT_LE(at[i - 1], at[i]) << "rank " << ctx.rank << ": '" << names[i - 1] << "' after '"
                                << names[i] << "'";
  EXPECT_TRUE(op.phases().empty()) << "phases reported with the clock off";
}

TEST(TpGpuWorker, UnfusedPairsMatchTheReference) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by TpGpu.*";
  auto ctx = worker_context(size_t(64) << 20);
  const int p = ctx->size;
  int failures = 0;
  for (tp::TpOp op :
       {tp::TpOp::kAllGatherGemm, tp::TpOp::kGemmReduceScatter, tp::TpOp::kGemmAllToAll}) {
    for (int variant = 0; variant < 4; ++variant) {
      tp::TpPlan plan;
      plan.fused = false;
      tp::TpRequest& r = plan.request;
      r.op = op;
      r.m = variant == 0 ? 1 : 517 * p + (variant == 3 ? p - 1 : 0);
      r.n = 384 * p;
      r.k = 256 * p;
      r.dtype = variant == 2 ? DType::kF16 : DType::kBF16;
      r.out_dtype = variant == 1 ? DType::kF32 : r.dtype;
      r.weight_layout = variant % 2 ? tp::WeightLayout::kNK : tp::WeightLayout::kKN;
      r.has_bias = variant != 2;
      r.world_size = p;
      r.num_machines = 1;
      SCOPED_TRACE(describe(r));
      tp::TpOperation operation(*ctx, plan);
      const TpProblem problem(r, 13);
      const std::vector<std::byte> got = run_on_gpu(operation, problem, *ctx);
      // NCCL sums partials in the output dtype in its own order: one rounding per rank.
      failures += problem.check_output(got, ctx->rank, p + 1, 5 - std::min(failures, 5));
    }
  }
  end_worker(*ctx);
}

TEST(TpGpuWorker, FusedAllGatherGemmMatchesTheReference) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by TpGpu.*";
  auto ctx = worker_context(size_t(256) << 20);
  const int p = ctx->size;
  int failures = 0;
  struct Variant {
    int64_t m;
    int64_t comm_rows;  // 0: a whole shard per signal
    DType dtype;
    bool bias;
  };
  for (const Variant& v : {Variant{1, 0, DType::kBF16, true}, Variant{517 * p + p - 1, 0, DType::kBF16, false},
                           Variant{517 * p + p - 1, 96, DType::kF16, true},
                           Variant{2048 * p, 256, DType::kBF16, true}}) {
    tp::TpPlan plan;
    plan.fused = true;
    plan.comm_rows = v.comm_rows;
    tp::TpRequest& r = plan.request;
    r.op = tp::TpOp::kAllGatherGemm;
    r.m = v.m;
    r.n = 384 * p;
    r.k = 512;
    r.dtype = r.out_dtype = v.dtype;
    r.weight_layout = tp::WeightLayout::kNK;
    r.has_bias = v.bias;
    r.world_size = p;
    r.num_machines = 1;
    SCOPED_TRACE(describe(plan));
    tp::TpOperation operation(*ctx, plan);
    const TpProblem problem(r, 29);
    const std::vector<std::byte> first = run_on_gpu(operation, problem, *ctx);
    failures += problem.check_output(first, ctx->rank, 1, 5 - std::min(failures, 5));
    for (int call = 1; call < 3; ++call) {
      EXPECT_TRUE(run_on_gpu(operation, problem, *ctx) == first)
          << "rank " << ctx->rank << ": call " << call << " differs from call 0";
    }
    // The caller's stream: local rows, GEMM; the pushes on the side stream.
    std::vector<std::string> names = {"local rows", "gemm"};
    for (int q = 1; q < p; ++q) names.push_back(str("sent to rank ", (ctx->rank + q) % p));
    expect_phases(operation, problem, *ctx, names, 2);
  }
  ctx->heap->check_errors();
  auto expect_unsupported = [&](tp::TpPlan plan, const char* what) {
    try {
      tp::TpOperation refused(*ctx, plan);
      ADD_FAILURE() << what << " was accepted on cuda";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << what << ": " << e.what();
    }
  };
  tp::TpPlan fused;
  fused.request.m = 64;
  fused.request.n = 64 * p;
  fused.request.k = 64 * p;
  fused.request.world_size = p;
  fused.request.op = tp::TpOp::kAllGatherGemm;
  fused.request.weight_layout = tp::WeightLayout::kKN;
  expect_unsupported(fused, "a fused ag_gemm plan with [K, N] weights");
  end_worker(*ctx);
}

// A fused op whose sources send owners their blocks (GEMM+ReduceScatter, GEMM+AllToAll) on
// `variants`: each output against the reference within `rounding_steps` roundings, three calls
// bitwise alike, and the phases: "sent to" each other owner on the side stream, then `after`.
struct OwnerVariant {
  int64_t m;
  tp::WeightLayout layout;
  DType out;
  bool bias;
};
void check_owner_operation(RankContext& ctx, tp::TpOp op, int64_t n, int64_t k, uint64_t seed,
                           int rounding_steps, const std::vector<OwnerVariant>& variants,
                           const std::vector<std::string>& after) {
  const int p = ctx.size;
  int failures = 0;
  for (const OwnerVariant& v : variants) {
    tp::TpPlan plan;
    plan.fused = true;
    tp::TpRequest& r = plan.request;
    r.op = op;
    r.m = v.m;
    r.n = n;
    r.k = k;
    r.dtype = DType::kBF16;
    r.out_dtype = v.out;
    r.weight_layout = v.layout;
    r.has_bias = v.bias;
    r.world_size = p;
    r.num_machines = 1;
    SCOPED_TRACE(describe(plan));
    tp::TpOperation operation(ctx, plan);
    const TpProblem problem(r, seed);
    const std::vector<std::byte> first = run_on_gpu(operation, problem, ctx);
    failures += problem.check_output(first, ctx.rank, rounding_steps, 5 - std::min(failures, 5));
    for (int call = 1; call < 3; ++call) {
      EXPECT_TRUE(run_on_gpu(operation, problem, ctx) == first)
          << "rank " << ctx.rank << ": call " << call << " differs from call 0";
    }
    std::vector<std::string> names;
    for (int q = 1; q < p; ++q) names.push_back(str("sent to rank ", (ctx.rank + q) % p));
    names.insert(names.end(), after.begin(), after.end());
    expect_phases(operation, problem, ctx, names, names.size());
  }
  ctx.heap->check_errors();
}

// One GEMM then copies (small shares) and one GEMM per owner (shares of 512 rows and more),
// each owner's rows sent by copy engine; both weight layouts, bias, M not a multiple of the
// ranks, f32 out; three calls bitwise alike (the owner's ordered sum); the phases reported (the
// caller's stream joins the side stream before the sum).
TEST(TpGpuWorker, FusedGemmReduceScatterMatchesTheReference) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by TpGpu.*";
  auto ctx = worker_context(size_t(256) << 20);
  const int p = ctx->size;
  // Partials rounded to the output type once each, summed in float32, rounded once more.
  check_owner_operation(*ctx, tp::TpOp::kGemmReduceScatter, 384, 256 * p, 31, p + 1,
                        {{1, tp::WeightLayout::kNK, DType::kBF16, true},
                         {37 * p + 1, tp::WeightLayout::kKN, DType::kF32, false},
                         {600 * p + p - 1, tp::WeightLayout::kNK, DType::kBF16, true},
                         {1024 * p, tp::WeightLayout::kKN, DType::kBF16, false}},
                        {"sum"});
  end_worker(*ctx);
}

// A GEMM per owner's column block (weights [N, K]) and one GEMM with pitched copies (weights
// [K, N]), each owner's block sent by copy engine; bias, M of one row (ranks without rows), M
// not a multiple of the ranks, f32 out; three calls bitwise alike; the phases reported.
TEST(TpGpuWorker, FusedGemmAllToAllMatchesTheReference) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by TpGpu.*";
  auto ctx = worker_context(size_t(256) << 20);
  const int p = ctx->size;
  check_owner_operation(*ctx, tp::TpOp::kGemmAllToAll, 192 * p, 512, 37, 1,
                        {{1, tp::WeightLayout::kNK, DType::kBF16, true},
                         {37 * p + 1, tp::WeightLayout::kKN, DType::kF32, false},
                         {600 * p + p - 1, tp::WeightLayout::kNK, DType::kBF16, true},
                         {1024 * p, tp::WeightLayout::kKN, DType::kBF16, true}},
                        {"blocks arrived", "copy out"});
  end_worker(*ctx);
}

// Holds the stream for 2 ms: the other ranks run ahead into the next calls.
void stall_stream(const Stream& stream) {
  EXPECT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream.cuda_stream()),
                               [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); },
                               nullptr),
            cudaSuccess);
}

// Six calls of each fused op enqueued back to back with no synchronization between them, two
// problems taking turns, one rank stalled before each call (a different one each time): a rank
// that ran ahead must not write into a peer's buffer before the peer has read the previous
// call's contents (the released words). Every call's output against its reference.
TEST(TpGpuWorker, FusedOperationsBackToBackWithSkewedRanks) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by TpGpu.*";
  auto ctx = worker_context(size_t(256) << 20);
  const int p = ctx->size;
  int failures = 0;
  for (tp::TpOp op :
       {tp::TpOp::kAllGatherGemm, tp::TpOp::kGemmReduceScatter, tp::TpOp::kGemmAllToAll}) {
    tp::TpPlan plan;
    plan.fused = true;
    tp::TpRequest& r = plan.request;
    r.op = op;
    const bool ag = op == tp::TpOp::kAllGatherGemm, rs = op == tp::TpOp::kGemmReduceScatter;
    plan.comm_rows = ag ? 256 : 0;
    r.m = ag ? 1024 * p : 640 * p;  // ReduceScatter: one GEMM per owner
    r.n = rs ? 384 : 384 * p;
    r.k = rs ? 256 * p : 512;
    r.dtype = r.out_dtype = DType::kBF16;
    r.weight_layout = tp::WeightLayout::kNK;
    r.has_bias = true;
    r.world_size = p;
    r.num_machines = 1;
    SCOPED_TRACE(describe(plan));
    tp::TpOperation operation(*ctx, plan);
    const TpProblem first(r, 41), second(r, 43);
    std::vector<DeviceCall> calls;
    for (int c = 0; c < 6; ++c) calls.push_back(upload_call(operation, c % 2 ? second : first, *ctx));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ctx->world->synchronize(ctx->stream);
    for (int c = 0; c < int(calls.size()); ++c) {
      if (c % p == ctx->rank) stall_stream(ctx->stream);
      run_call(operation, calls[size_t(c)], *ctx);
    }
    ctx->world->synchronize(ctx->stream);
    for (int c = 0; c < int(calls.size()); ++c) {
      SCOPED_TRACE(str("call ", c));
      failures += calls[size_t(c)].problem->check_output(
          download_output(calls[size_t(c)]), ctx->rank, rs ? p + 1 : 1, 5 - std::min(failures, 5));
    }
  }
  ctx->heap->check_errors();
  end_worker(*ctx);
}

}  // namespace
}  // namespace tessera::testing
