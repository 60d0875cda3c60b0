// The tensor-parallel operations' test problem: global A [M, K], W [K, N] and bias [N] with
// fixed seeds, each rank's operands cut from them as rank_shapes() says, and the float64
// reference of every rank's output with an error bound per element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/tp/request.h"

namespace tessera::testing {

class TpProblem {
 public:
  explicit TpProblem(const tp::TpRequest& request, uint64_t seed = 7) : r_(request) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, size_t count, DType dtype) {
      v.resize(count);
      for (float& x : v) x = round_to_dtype(dtype, dist(rng));
    };
    fill(a_, size_t(r_.m * r_.k), r_.dtype);
    fill(w_, size_t(r_.k * r_.n), r_.dtype);
    fill(bias_, r_.has_bias ? size_t(r_.n) : 0, r_.out_dtype);
  }

  // This rank's operands, stored in the request's dtypes.
  std::vector<std::byte> a(int rank) const {
    const tp::RankShapes s = tp::rank_shapes(r_, rank);
    const tp::RowRange rows = tp::row_range(r_.m, r_.world_size, rank);
    const bool rs = r_.op == tp::TpOp::kGemmReduceScatter;
    const int64_t row0 = rs ? 0 : rows.begin, col0 = rs ? rank * s.a_cols : 0;
    return pack(s.a_rows, s.a_cols, r_.dtype,
                [&](int64_t i, int64_t j) { return a_[size_t((row0 + i) * r_.k + col0 + j)]; });
  }
  std::vector<std::byte> b(int rank) const {
    const tp::RankShapes s = tp::rank_shapes(r_, rank);
    const int64_t k_rank = r_.op == tp::TpOp::kGemmReduceScatter ? r_.k / r_.world_size : r_.k;
    const int64_t n_rank = r_.op == tp::TpOp::kAllGatherGemm ? r_.n / r_.world_size : r_.n;
    const int64_t k0 = k_rank == r_.k ? 0 : rank * k_rank;
    const int64_t n0 = n_rank == r_.n ? 0 : rank * n_rank;
    const bool kn = r_.weight_layout == tp::WeightLayout::kKN;
    return pack(s.b_rows, s.b_cols, r_.dtype, [&](int64_t i, int64_t j) {
      const int64_t kk = kn ? i : j, nn = kn ? j : i;
      return w_[size_t((k0 + kk) * r_.n + n0 + nn)];
    });
  }
  std::vector<std::byte> bias(int rank) const {
    if (!r_.has_bias) return {};
    const tp::RankShapes s = tp::rank_shapes(r_, rank);
    const int64_t n0 = r_.op == tp::TpOp::kAllGatherGemm ? rank * s.bias : 0;
    return pack(1, s.bias, r_.out_dtype, [&](int64_t, int64_t j) { return bias_[size_t(n0 + j)]; });
  }

  // Reference output element (i, j) of `rank` and its error bound: the output's rounding,
  // float32 accumulation over K and, for ReduceScatter, `sum_roundings` roundings of sums of
  // the ranks' partials in the output dtype (each partial is rounded once, a two-level sum
  // once more per machine sum, a ring reduce-scatter at every step).
  struct Expected {
    double value;
    double bound;
  };
  // Elements of rank `rank`'s output `got` (out_dtype, rank_shapes' out) outside expected()'s
  // bound; the first `budget` are reported as test failures.
  int check_output(const std::vector<std::byte>& got, int rank, int sum_roundings,
                   int budget) const {
    const tp::RankShapes s = tp::rank_shapes(r_, rank);
    int failures = 0;
    for (int64_t i = 0; i < s.out_rows; ++i) {
      for (int64_t j = 0; j < s.out_cols; ++j) {
        const double v = load_as_float(got.data(), r_.out_dtype, i * s.out_cols + j);
        const Expected want = expected(rank, i, j, sum_roundings);
        if (std::fabs(v - want.value) <= want.bound) continue;
        if (failures++ < budget)
          ADD_FAILURE() << "rank " << rank << " out[" << i << ", " << j << "] = " << v
                        << ", expected " << want.value << " within " << want.bound;
      }
    }
    return failures;
  }

  Expected expected(int rank, int64_t i, int64_t j, int sum_roundings = 1) const {
    const tp::RankShapes s = tp::rank_shapes(r_, rank);
    int64_t row = i, col = j;
    if (r_.op == tp::TpOp::kGemmReduceScatter)
      row += tp::row_range(r_.m, r_.world_size, rank).begin;
    if (r_.op != tp::TpOp::kGemmReduceScatter) col += rank * s.out_cols;
    double sum = 0, magnitude = 0;
    const bool rs = r_.op == tp::TpOp::kGemmReduceScatter;
    const int64_t k_part = rs ? r_.k / r_.world_size : r_.k;
    double partial = 0, partial_magnitudes = 0;
    for (int64_t kk = 0; kk < r_.k; ++kk) {
      const double term = double(a_[size_t(row * r_.k + kk)]) * w_[size_t(kk * r_.n + col)];
      sum += term;
      partial += term;
      magnitude += std::fabs(term);
      if ((kk + 1) % k_part == 0) {
        partial_magnitudes += std::fabs(partial);
        partial = 0;
      }
    }
    if (r_.has_bias) sum += bias_[size_t(col)];
    const double out_eps = unit(r_.out_dtype);
    double bound = out_eps * std::fabs(sum) + double(r_.k) * 1.2e-7 * magnitude + 1e-30;
    if (rs) bound += out_eps * sum_roundings * partial_magnitudes;
    return {sum, bound};
  }

 private:
  static double unit(DType dtype) {  // relative rounding error of one store
    return dtype == DType::kBF16 ? 1.0 / 256 : dtype == DType::kF16 ? 1.0 / 2048 : 1.2e-7;
  }
  template <typename Fn>
  static std::vector<std::byte> pack(int64_t rows, int64_t cols, DType dtype, Fn&& value) {
    std::vector<std::byte> out(size_t(rows * cols) * dtype_size(dtype));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j)
        store_from_float(out.data(), dtype, i * cols + j, value(i, j));
    }
    return out;
  }

  tp::TpRequest r_;
  std::vector<float> a_, w_, bias_;
};

}  // namespace tessera::testing
