// Tensor-parallel operations on the cuda backend: the unfused pairs (cuBLASLt and NCCL) on
// every visible GPU (up to 4; one rank on a one-GPU machine) against the float64 reference:
// every op, both weight layouts, with and without bias, M not a multiple of the ranks, bf16 and
// f16 in, bf16/f32 out; a fused plan is refused on cuda until its kernels exist.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "dist/tp_test_util.h"
#include "gpu_workers.h"
#include "tessera/comm/context.h"
#include "tessera/tp/operation.h"

namespace tessera::testing {
namespace {

int num_gpus_for_test() { return gpus_for_test(4); }

TEST(TpGpu, UnfusedPairsMatchTheReference) {
  TESSERA_REQUIRE_GPUS(num_gpus_for_test(), 1);
  run_gpu_workers("TpGpuWorker", "UnfusedPairsMatchTheReference", num_gpus_for_test(), 60000);
}

// ---------------------------------------------------------------------------------------------
// Worker side

std::vector<std::byte> run_on_gpu(tp::TpOperation& op, const TpProblem& problem, RankContext& ctx) {
  const tp::TpRequest& r = op.plan().request;
  const tp::RankShapes s = op.shapes();
  auto upload = [&](const std::vector<std::byte>& host) {
    void* device = nullptr;
    if (!host.empty()) {
      EXPECT_EQ(cudaMalloc(&device, host.size()), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    return device;
  };
  void* a = upload(problem.a(ctx.rank));
  void* b = upload(problem.b(ctx.rank));
  void* bias = upload(problem.bias(ctx.rank));
  const size_t out_bytes = size_t(s.out_rows * s.out_cols) * dtype_size(r.out_dtype);
  void* out = nullptr;
  EXPECT_EQ(cudaMalloc(&out, out_bytes), cudaSuccess);
  EXPECT_EQ(cudaMemset(out, 0xff, out_bytes), cudaSuccess);  // NaN in every dtype
  op.run(TensorView(a, r.dtype, ctx.device, {s.a_rows, s.a_cols}),
         TensorView(b, r.dtype, ctx.device, {s.b_rows, s.b_cols}),
         r.has_bias ? TensorView(bias, r.out_dtype, ctx.device, {s.bias}) : TensorView(),
         TensorView(out, r.out_dtype, ctx.device, {s.out_rows, s.out_cols}), ctx.stream);
  ctx.world->synchronize(ctx.stream);
  std::vector<std::byte> host(out_bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), out, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (void* p : {a, b, bias, out}) cudaFree(p);
  return host;
}

TEST(TpGpuWorker, UnfusedPairsMatchTheReference) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by TpGpu.*";
  ContextOptions options;
  options.heap_bytes = size_t(64) << 20;
  auto ctx = create_cuda_context(bootstrap_from_launch(detect_launch()), options);
  const int p = ctx->size;
  int failures = 0;
  for (tp::TpOp op : {tp::TpOp::kAllGatherGemm, tp::TpOp::kGemmReduceScatter, tp::TpOp::kGemmAllToAll}) {
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
      const tp::RankShapes s = operation.shapes();
      for (int64_t i = 0; i < s.out_rows && failures < 5; ++i) {
        for (int64_t j = 0; j < s.out_cols && failures < 5; ++j) {
          const double v = load_as_float(got.data(), r.out_dtype, i * s.out_cols + j);
          // NCCL sums partials in the output dtype in its own order: one rounding per rank.
          const auto want = problem.expected(ctx->rank, i, j, p + 1);
          if (!(std::fabs(v - want.value) <= want.bound)) {
            ADD_FAILURE() << "rank " << ctx->rank << " out[" << i << ", " << j << "] = " << v
                          << ", expected " << want.value << " within " << want.bound;
            ++failures;
          }
        }
      }
    }
  }
  tp::TpPlan fused;
  fused.request.m = 64;
  fused.request.n = 64 * p;
  fused.request.k = 64 * p;
  fused.request.world_size = p;
  try {
    tp::TpOperation refused(*ctx, fused);
    ADD_FAILURE() << "a fused plan on cuda was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
  ctx->bootstrap->barrier();
  std::fflush(stdout);
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
}

}  // namespace
}  // namespace tessera::testing
