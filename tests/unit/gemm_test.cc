// tessera::gemm::Gemm on the cpu backend: the float32 reference against float64 for both weight
// layouts, with and without bias, odd sizes; bad shapes, dtypes and operands refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/gemm/gemm.h"

namespace tessera::gemm {
namespace {

std::vector<std::byte> random_matrix(int64_t count, DType dtype, std::mt19937& rng,
                                     std::vector<double>& values) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::byte> bytes(size_t(count) * dtype_size(dtype));
  values.resize(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    const float v = round_to_dtype(dtype, dist(rng));
    store_from_float(bytes.data(), dtype, i, v);
    values[size_t(i)] = v;
  }
  return bytes;
}

TEST(Gemm, CpuReferenceMatchesFloat64) {
  std::mt19937 rng(3);
  const Device cpu = Device::cpu();
  for (bool weight_nk : {false, true}) {
    for (bool bias : {false, true}) {
      for (DType out_dtype : {DType::kBF16, DType::kF32}) {
        GemmShape shape{67, 33, 129, DType::kBF16, out_dtype, weight_nk, bias};
        std::vector<double> av, bv, biasv;
        auto a = random_matrix(shape.m * shape.k, shape.dtype, rng, av);
        auto b = random_matrix(shape.k * shape.n, shape.dtype, rng, bv);
        auto bias_bytes = random_matrix(shape.n, out_dtype, rng, biasv);
        std::vector<std::byte> out(size_t(shape.m * shape.n) * dtype_size(out_dtype));
        Gemm gemm(shape, cpu);
        gemm.run(TensorView(a.data(), shape.dtype, cpu, {shape.m, shape.k}),
                 weight_nk ? TensorView(b.data(), shape.dtype, cpu, {shape.n, shape.k})
                           : TensorView(b.data(), shape.dtype, cpu, {shape.k, shape.n}),
                 bias ? TensorView(bias_bytes.data(), out_dtype, cpu, {shape.n}) : TensorView(),
                 TensorView(out.data(), out_dtype, cpu, {shape.m, shape.n}), Stream::cpu());
        const double eps = out_dtype == DType::kBF16 ? 1.0 / 256 : 1.2e-7;
        for (int64_t i = 0; i < shape.m; ++i) {
          for (int64_t j = 0; j < shape.n; ++j) {
            double sum = bias ? biasv[size_t(j)] : 0.0, magnitude = 0;
            for (int64_t k = 0; k < shape.k; ++k) {
              const double w = weight_nk ? bv[size_t(j * shape.k + k)] : bv[size_t(k * shape.n + j)];
              sum += av[size_t(i * shape.k + k)] * w;
              magnitude += std::fabs(av[size_t(i * shape.k + k)] * w);
            }
            const double got = load_as_float(out.data(), out_dtype, i * shape.n + j);
            ASSERT_NEAR(got, sum, eps * std::fabs(sum) + shape.k * 1.2e-7 * magnitude + 1e-30)
                << "out[" << i << ", " << j << "] nk " << weight_nk << " bias " << bias;
          }
        }
      }
    }
  }
}

TEST(Gemm, RefusesBadShapesAndOperandsByName) {
  const Device cpu = Device::cpu();
  auto expect = [](auto&& fn, const char* part) {
    try {
      fn();
      ADD_FAILURE() << "expected an error naming " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect([&] { Gemm g({0, 8, 8}, cpu); }, "M 0");
  expect([&] { Gemm g({8, 8, 8, DType::kU8}, cpu); }, "dtype = u8");
  expect([&] { Gemm g({8, 8, 8, DType::kBF16, DType::kI32}, cpu); }, "out_dtype = i32");
  std::vector<std::byte> mem(4096);
  Gemm g({4, 8, 16}, cpu);
  const TensorView b(mem.data(), DType::kBF16, cpu, {16, 8});
  const TensorView out(mem.data(), DType::kBF16, cpu, {4, 8});
  expect([&] { g.run(TensorView(mem.data(), DType::kBF16, cpu, {3, 16}), b, {}, out, Stream::cpu()); },
         "a = bf16[3, 16] cpu: expected shape [4, 16]");
  expect([&] { g.run(TensorView(mem.data(), DType::kBF16, cpu, {4, 16}), TensorView(mem.data(), DType::kF16, cpu, {16, 8}), {}, out, Stream::cpu()); },
         "b");
  expect([&] { g.run(TensorView(mem.data(), DType::kBF16, cpu, {4, 16}), b, TensorView(mem.data(), DType::kBF16, cpu, {8}), out, Stream::cpu()); },
         "the shape has no bias");
  expect([&] { g.run(TensorView(), b, {}, out, Stream::cpu()); }, "a: expected bf16[4, 16]");
  expect([&] { g.run(TensorView(mem.data(), DType::kBF16, cpu, {4, 16}), b, {}, out, Stream::cpu(), -1); },
         "max_sms = -1: expected >= 0");
}

}  // namespace
}  // namespace tessera::gemm
