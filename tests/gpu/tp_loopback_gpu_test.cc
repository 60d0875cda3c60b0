// TpLoopback on one GPU: four ranks' fused AllGather+GEMM (copy-engine pushes, arrival words,
// the kernel waiting per row tile in each rank's order) against cuBLASLt on the gathered rows;
// M that neither the tile nor P divides, whole shards and smaller communication tiles, with and
// without bias, twice in a row (the arrival words count calls). The hooked kernel with every
// arrival signalled matches too.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"
#include "tessera/runtime/memory.h"
#include "tessera/tp/loopback.h"

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

TEST(TpLoopbackGpu, RefusesWhatIsNotBuilt) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "no GPU";
  TpPlan plan;
  plan.request = {TpOp::kGemmReduceScatter, 256,   1024, 1024, DType::kBF16, DType::kBF16,
                  WeightLayout::kNK,        false, 4,    1};
  EXPECT_THROW({ TpLoopback refused(plan, Device::cuda(0)); }, Error);
  plan.request.op = TpOp::kAllGatherGemm;
  plan.request.weight_layout = WeightLayout::kKN;
  EXPECT_THROW({ TpLoopback refused(plan, Device::cuda(0)); }, Error);
}

}  // namespace
}  // namespace tessera::tp
