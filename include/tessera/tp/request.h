// What a tensor-parallel GEMM with fused communication computes (Flux), independent of how
// it is planned or run. Activations are 2-D [rows, features] (callers flatten [B, L] into
// rows); "M" is the global row count, split over the P ranks of the group by row_range().
//
//   kAllGatherGemm     column-parallel layers (QKV, MLP gate/up):
//                      a [m_r, K] rank r's rows, b [K, N/P] (or [N/P, K]), bias [N/P]
//                      out [M, N/P] = allgather_rows(a) . b + bias
//   kGemmReduceScatter row-parallel layers (attention output, MLP down):
//                      a [M, K/P], b [K/P, N] (or [N, K/P]), bias [N] (added once)
//                      out [m_r, N] = rows r of sum_over_ranks(a_j . b_j) + bias
//   kGemmAllToAll      Ulysses' input projection, going head-sharded:
//                      a [m_r, K], b [K, N] (or [N, K]), bias [N]
//                      out [M, N/P] = columns r of allgather_rows(a . b + bias)
//                      (column block j of b is what rank j receives: order the weight's
//                      columns so that block j holds rank j's heads)
#pragma once

#include <cstdint>
#include <string>

#include "tessera/core/dtype.h"

namespace tessera::tp {

enum class TpOp : uint8_t { kAllGatherGemm, kGemmReduceScatter, kGemmAllToAll };
const char* tp_op_name(TpOp op);  // "ag_gemm", "gemm_rs", "gemm_a2a"
// Parses tp_op_name's names; throws kInvalidArgument naming `what`.
TpOp parse_tp_op(const std::string& name, const char* what = "op");

// Layout of the weight operand b: kKN is [K, N] row-major; kNK is [N, K] row-major (torch's
// nn.Linear weight), i.e. b^T is used.
enum class WeightLayout : uint8_t { kKN, kNK };
const char* weight_layout_name(WeightLayout layout);

struct TpRequest {
  TpOp op = TpOp::kAllGatherGemm;
  int64_t m = 0;  // global rows
  int64_t n = 0;  // global output features
  int64_t k = 0;  // global input features
  DType dtype = DType::kBF16;      // a and b
  DType out_dtype = DType::kBF16;  // out (and bias)
  WeightLayout weight_layout = WeightLayout::kKN;
  bool has_bias = false;
  int world_size = 1;
  int num_machines = 1;  // consecutive ranks per machine, equal sizes
};

// Throws kInvalidArgument naming the first field outside the contract: sizes >= 1, dtype bf16,
// f16 or f32, out_dtype bf16, f16 or f32, world_size >= 1, num_machines dividing world_size,
// and the dimension each op shards divisible by world_size (N for kAllGatherGemm and
// kGemmAllToAll, K for kGemmReduceScatter).
void validate_request(const TpRequest& request);

// Rows [begin, begin + count) of `rank`'s share of `m` rows split over `world_size` ranks:
// floor(m * rank / P) to floor(m * (rank + 1) / P), so shares differ by at most one row and
// M need not divide by P.
struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};
RowRange row_range(int64_t m, int world_size, int rank);

// Shapes of one rank's operands, as run() expects them.
struct RankShapes {
  int64_t a_rows = 0, a_cols = 0;
  int64_t b_rows = 0, b_cols = 0;  // in the request's weight layout
  int64_t bias = 0;                // 0 without bias
  int64_t out_rows = 0, out_cols = 0;
};
RankShapes rank_shapes(const TpRequest& request, int rank);

std::string describe(const TpRequest& request);  // "ag_gemm M4096 N7168 K8192 bf16 tp4 1x4"

}  // namespace tessera::tp
