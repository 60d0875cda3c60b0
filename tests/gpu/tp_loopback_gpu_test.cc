// TpLoopback on one GPU: four loopback ranks (threads of this process on one GPU) running the
// cuda backend's fused operations, TpOperation's code for several GPUs.
//   AllGather+GEMM (copy-engine pushes, arrival words, the kernel waiting per row tile in each
//   rank's order) against cuBLASLt on the gathered rows: M that neither the tile nor P divides,
//   whole shards and smaller communication tiles, with and without bias, twice in a row (the
//   arrival words count calls); the hooked kernel with every arrival signalled matches too.
//   GEMM+ReduceScatter and GEMM+AllToAll (per-owner GEMMs, copies to the owners' symmetric
//   buffers, signal words, the owner's ordered sum or copy out) against the float64 reference:
//   both weight layouts, bias, f32 out, M of one row (ranks without rows), M not a multiple of
//   the ranks, the one-GEMM and per-owner forms; three calls bitwise alike.
//   Loopback ranks have no world communicator: an unfused plan is refused, naming it.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "dist/tp_test_util.h"
#include "tessera/comm/loopback.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"
#include "tessera/runtime/memory.h"
#include "tessera/tp/loopback.h"
#include "tessera/tp/operation.h"

namespace tessera::tp {
namespace {

Buffer device_copy(const std::vector<std::byte>& host, Device gpu) {
  Buffer b = Buffer::allocate(std::max<size_t>(host.size(), 1), gpu);
  EXPECT_EQ(cudaMemcpy(b.data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return b;
}

std::vector<std::byte> host_copy(const Buffer& b, size_t bytes) {
  std::vector<std::byte> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), b.data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Elements of `got` farther from `want` than two roundings of the output type allow.
int64_t mismatches(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                   DType dtype, int64_t count) {
  const double eps = dtype == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double g = load_as_float(got.data(), dtype, i), w = load_as_float(want.data(), dtype, i);
    bad += !(std::fabs(g - w) <= eps * std::fabs(w) + 1e-2);
  }
  return bad;
}

TEST(TpLoopbackGpu, AllGatherGemmMatchesCublasLtOnTheGatheredRows) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "no GPU";
  const Device gpu = Device::cuda(0);
  const Stream stream = Stream::create_cuda(0);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  constexpr int kRanks = 4;
  const DType dtype = DType::kBF16;
  const int64_t n = 4 * 640, k = 1024;
  for (const int64_t m : {int64_t(128), int64_t(1000), int64_t(4096)}) {
    for (const int64_t comm_rows : {int64_t(0), int64_t(96)}) {
      const bool bias = m == 1000;
      SCOPED_TRACE(::testing::Message()
                   << "M" << m << " comm_rows " << comm_rows << (bias ? " bias" : ""));
      TpPlan plan;
      plan.request = {TpOp::kAllGatherGemm, m,    n,      k, dtype, dtype,
                      WeightLayout::kNK,    bias, kRanks, 1};
      plan.comm_rows = comm_rows;
      TpLoopback loopback(plan, gpu);
      auto random_bytes = [&](int64_t count) {
        std::vector<std::byte> h(size_t(count) * 2);
        for (int64_t i = 0; i < count; ++i) store_from_float(h.data(), dtype, i, dist(rng));
        return h;
      };
      const std::vector<std::byte> a_host = random_bytes(m * k);
      Buffer a_full = device_copy(a_host, gpu);
      std::vector<Buffer> a, b, bias_d, out;
      std::vector<TensorView> av, bv, biasv, outv;
      const int64_t n_rank = n / kRanks;
      for (int r = 0; r < kRanks; ++r) {
        const RowRange rows = row_range(m, kRanks, r);
        a.push_back(
            device_copy(std::vector<std::byte>(a_host.begin() + rows.begin * k * 2,
                                               a_host.begin() + (rows.begin + rows.count) * k * 2),
                        gpu));
        b.push_back(device_copy(random_bytes(n_rank * k), gpu));
        bias_d.push_back(device_copy(random_bytes(n_rank), gpu));
        out.push_back(Buffer::allocate(size_t(m * n_rank) * 2, gpu));
        av.emplace_back(a.back().data(), dtype, gpu, std::initializer_list<int64_t>{rows.count, k});
        bv.emplace_back(b.back().data(), dtype, gpu, std::initializer_list<int64_t>{n_rank, k});
        biasv.push_back(bias ? TensorView(bias_d.back().data(), dtype, gpu, {n_rank})
                             : TensorView());
        outv.emplace_back(out.back().data(), dtype, gpu, std::initializer_list<int64_t>{m, n_rank});
      }
      const gemm::GemmShape shape{m, n_rank, k, dtype, dtype, true, bias};
      gemm::Gemm reference(shape, gpu, gemm::GemmImpl::kCublasLt);
      Buffer want = Buffer::allocate(size_t(m * n_rank) * 2, gpu);
      for (int call = 0; call < 2; ++call) {
        for (Buffer& o : out)
          ASSERT_EQ(cudaMemset(o.data(), 0xff, size_t(m * n_rank) * 2), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the memsets' stream is not `stream`
        loopback.run(av, bv, biasv, outv, stream);
        stream.synchronize();
        for (int r = 0; r < kRanks; ++r) {
          reference.run(TensorView(a_full.data(), dtype, gpu, {m, k}), bv[size_t(r)],
                        biasv[size_t(r)], TensorView(want.data(), dtype, gpu, {m, n_rank}), stream);
          stream.synchronize();
          EXPECT_EQ(mismatches(host_copy(out[size_t(r)], size_t(m * n_rank) * 2),
                               host_copy(want, size_t(m * n_rank) * 2), dtype, m * n_rank),
                    0)
              << "rank " << r << " call " << call << " (" << loopback.gemm_config() << ")";
        }
      }
      // The hooked kernel alone, every arrival signalled: rank 1's product.
      loopback.run_hooked_gemm(1, TensorView(a_full.data(), dtype, gpu, {m, k}), bv[1], biasv[1],
                               outv[1], stream);
      reference.run(TensorView(a_full.data(), dtype, gpu, {m, k}), bv[1], biasv[1],
                    TensorView(want.data(), dtype, gpu, {m, n_rank}), stream);
      stream.synchronize();
      EXPECT_EQ(mismatches(host_copy(out[1], size_t(m * n_rank) * 2),
                           host_copy(want, size_t(m * n_rank) * 2), dtype, m * n_rank),
                0);
    }
  }
}

// Every rank's output of `loopback` on `problem`'s operands, three calls; each against the
// float64 reference within `rounding_steps` roundings of a sum, and the calls bitwise alike.
void check_against_reference(TpLoopback& loopback, const testing::TpProblem& problem,
                             int rounding_steps) {
  const TpRequest& r = loopback.plan().request;
  const Device gpu = Device::cuda(0);
  const Stream stream = Stream::create_cuda(0);
  const int p = r.world_size;
  std::vector<Buffer> a, b, bias, out;
  std::vector<TensorView> av, bv, biasv, outv;
  for (int rank = 0; rank < p; ++rank) {
    const RankShapes sh = rank_shapes(r, rank);
    a.push_back(device_copy(problem.a(rank), gpu));
    b.push_back(device_copy(problem.b(rank), gpu));
    bias.push_back(device_copy(problem.bias(rank), gpu));
    out.push_back(Buffer::allocate(
        std::max<size_t>(size_t(sh.out_rows * sh.out_cols) * dtype_size(r.out_dtype), 1), gpu));
    av.push_back(sh.a_rows == 0
                     ? TensorView()
                     : TensorView(a.back().data(), r.dtype, gpu, {sh.a_rows, sh.a_cols}));
    bv.emplace_back(b.back().data(), r.dtype, gpu,
                    std::initializer_list<int64_t>{sh.b_rows, sh.b_cols});
    biasv.push_back(r.has_bias ? TensorView(bias.back().data(), r.out_dtype, gpu, {sh.bias})
                               : TensorView());
    outv.push_back(sh.out_rows == 0 ? TensorView()
                                    : TensorView(out.back().data(), r.out_dtype, gpu,
                                                 {sh.out_rows, sh.out_cols}));
  }
  std::vector<std::vector<std::byte>> first(static_cast<size_t>(p));
  for (int call = 0; call < 3; ++call) {
    for (Buffer& o : out) ASSERT_EQ(cudaMemset(o.data(), 0xff, o.bytes()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the memsets' stream is not `stream`
    loopback.run(av, bv, biasv, outv, stream);
    stream.synchronize();
    for (int rank = 0; rank < p; ++rank) {
      const RankShapes sh = rank_shapes(r, rank);
      const std::vector<std::byte> got =
          host_copy(out[size_t(rank)], size_t(sh.out_rows * sh.out_cols) * dtype_size(r.out_dtype));
      if (call > 0) {
        EXPECT_TRUE(got == first[size_t(rank)])
            << "rank " << rank << ": call " << call << " differs from call 0";
        continue;
      }
      first[size_t(rank)] = got;
      problem.check_output(got, rank, rounding_steps, 5);
    }
  }
}

// Four loopback ranks of `op` (N, K as given) on M of one row (ranks without rows), M not a
// multiple of the ranks, and shares of 600 and 1024 rows; both weight layouts, f32 out, bias.
void check_owner_operation(TpOp op, int64_t n, int64_t k, uint64_t seed, int rounding_steps) {
  constexpr int kRanks = 4;
  struct Variant {
    int64_t m;
    WeightLayout layout;
    DType out;
    bool bias;
  };
  for (const Variant& v : {Variant{1, WeightLayout::kNK, DType::kBF16, true},
                           Variant{37 * kRanks + 1, WeightLayout::kKN, DType::kF32, false},
                           Variant{600 * kRanks + 3, WeightLayout::kNK, DType::kBF16, true},
                           Variant{1024 * kRanks, WeightLayout::kKN, DType::kBF16, true}}) {
    TpPlan plan;
    plan.request = {op, v.m, n, k, DType::kBF16, v.out, v.layout, v.bias, kRanks, 1};
    SCOPED_TRACE(::testing::Message()
                 << tp_op_name(op) << " M" << v.m << " " << weight_layout_name(v.layout) << " "
                 << dtype_name(v.out) << (v.bias ? " bias" : ""));
    TpLoopback loopback(plan, Device::cuda(0));
    check_against_reference(loopback, testing::TpProblem(plan.request, seed), rounding_steps);
  }
}

// One GEMM then copies (small shares), one GEMM per owner (shares of 512 rows and more);
// partials rounded to the output type once each, summed in float32, rounded once more.
TEST(TpLoopbackGpu, GemmReduceScatterMatchesTheReference) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "no GPU";
  check_owner_operation(TpOp::kGemmReduceScatter, 384, 256 * 4, 31, 4 + 1);
}

// A GEMM per owner's column block (weights [N, K]), one GEMM and pitched copies ([K, N]).
TEST(TpLoopbackGpu, GemmAllToAllMatchesTheReference) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "no GPU";
  check_owner_operation(TpOp::kGemmAllToAll, 192 * 4, 512, 37, 1);
}

TEST(TpLoopbackGpu, RefusesWhatIsNotBuilt) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "no GPU";
  TpPlan plan;
  plan.request = {TpOp::kAllGatherGemm, 256,   1024, 1024, DType::kBF16, DType::kBF16,
                  WeightLayout::kKN,    false, 4,    1};
  EXPECT_THROW({ TpLoopback refused(plan, Device::cuda(0)); }, Error);
  // Loopback ranks have no world communicator (NCCL takes one rank per GPU).
  LoopbackRanks ranks(2, Device::cuda(0));
  plan.request = {TpOp::kGemmReduceScatter, 256,   1024, 1024, DType::kBF16, DType::kBF16,
                  WeightLayout::kNK,        false, 2,    1};
  plan.fused = false;
  try {
    ranks.run_each([&](RankContext& ctx) { TpOperation refused(ctx, plan); });
    ADD_FAILURE() << "an unfused plan on loopback ranks was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("world communicator"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::tp
