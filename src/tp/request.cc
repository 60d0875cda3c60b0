// TpRequest checks, row shares and per-rank operand shapes.
#include "tessera/tp/request.h"

#include "tessera/core/error.h"

namespace tessera::tp {

const char* tp_op_name(TpOp op) {
  switch (op) {
    case TpOp::kAllGatherGemm: return "ag_gemm";
    case TpOp::kGemmReduceScatter: return "gemm_rs";
    case TpOp::kGemmAllToAll: return "gemm_a2a";
  }
  return "?";
}

TpOp parse_tp_op(const std::string& name, const char* what) {
  for (TpOp op : {TpOp::kAllGatherGemm, TpOp::kGemmReduceScatter, TpOp::kGemmAllToAll}) {
    if (name == tp_op_name(op)) return op;
  }
  throw_error(ErrorCode::kInvalidArgument,
              str(what, " = '", name, "': expected ag_gemm, gemm_rs or gemm_a2a"));
}

const char* weight_layout_name(WeightLayout layout) {
  return layout == WeightLayout::kKN ? "kn" : "nk";
}

namespace {

bool is_gemm_dtype(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32;
}

}  // namespace

void validate_request(const TpRequest& r) {
  TESSERA_CHECK_ARG(r.m >= 1, "m = ", r.m, ": expected >= 1 rows");
  TESSERA_CHECK_ARG(r.n >= 1, "n = ", r.n, ": expected >= 1 output features");
  TESSERA_CHECK_ARG(r.k >= 1, "k = ", r.k, ": expected >= 1 input features");
  TESSERA_CHECK_ARG(is_gemm_dtype(r.dtype), "dtype = ", dtype_name(r.dtype),
                    ": expected bf16, f16 or f32");
  TESSERA_CHECK_ARG(is_gemm_dtype(r.out_dtype), "out_dtype = ", dtype_name(r.out_dtype),
                    ": expected bf16, f16 or f32");
  TESSERA_CHECK_ARG(r.world_size >= 1, "world_size = ", r.world_size, ": expected >= 1");
  TESSERA_CHECK_ARG(r.num_machines >= 1 && r.world_size % r.num_machines == 0,
                    "num_machines = ", r.num_machines, ": expected a divisor of world_size = ",
                    r.world_size);
  const int p = r.world_size;
  switch (r.op) {
    case TpOp::kAllGatherGemm:
    case TpOp::kGemmAllToAll:
      TESSERA_CHECK_ARG(r.n % p == 0, "n = ", r.n, ": expected a multiple of world_size = ", p,
                        " (", tp_op_name(r.op), " shards the output features over the ranks)");
      break;
    case TpOp::kGemmReduceScatter:
      TESSERA_CHECK_ARG(r.k % p == 0, "k = ", r.k, ": expected a multiple of world_size = ", p,
                        " (gemm_rs shards the input features over the ranks)");
      break;
  }
  // Element offsets are int64 everywhere; keep every operand's element count far from it.
  constexpr int64_t kMaxElements = int64_t(1) << 40;
  TESSERA_CHECK_ARG(r.m <= kMaxElements / r.k && r.m <= kMaxElements / r.n &&
                        r.n <= kMaxElements / r.k,
                    "m, n, k = ", r.m, ", ", r.n, ", ", r.k,
                    ": expected every operand to hold at most 2^40 elements");
}

RowRange row_range(int64_t m, int world_size, int rank) {
  const int64_t begin = m * rank / world_size;
  const int64_t end = m * (rank + 1) / world_size;
  return {begin, end - begin};
}

RankShapes rank_shapes(const TpRequest& r, int rank) {
  const int p = r.world_size;
  const RowRange share = row_range(r.m, p, rank);
  RankShapes s;
  int64_t k_rank = r.k, n_rank = r.n;
  switch (r.op) {
    case TpOp::kAllGatherGemm:
      s.a_rows = share.count;
      n_rank = r.n / p;
      s.bias = r.has_bias ? n_rank : 0;
      s.out_rows = r.m;
      s.out_cols = n_rank;
      break;
    case TpOp::kGemmReduceScatter:
      s.a_rows = r.m;
      k_rank = r.k / p;
      s.bias = r.has_bias ? r.n : 0;
      s.out_rows = share.count;
      s.out_cols = r.n;
      break;
    case TpOp::kGemmAllToAll:
      s.a_rows = share.count;
      s.bias = r.has_bias ? r.n : 0;
      s.out_rows = r.m;
      s.out_cols = r.n / p;
      break;
  }
  s.a_cols = k_rank;
  if (r.weight_layout == WeightLayout::kKN) {
    s.b_rows = k_rank;
    s.b_cols = n_rank;
  } else {
    s.b_rows = n_rank;
    s.b_cols = k_rank;
  }
  return s;
}

std::string describe(const TpRequest& r) {
  return str(tp_op_name(r.op), " M", r.m, " N", r.n, " K", r.k, " ", dtype_name(r.dtype),
             r.out_dtype != r.dtype ? str("->", dtype_name(r.out_dtype)) : std::string(),
             r.weight_layout == WeightLayout::kNK ? " weight[N,K]" : "", r.has_bias ? " +bias" : "",
             " tp", r.world_size, " ", r.num_machines, "x", r.world_size / r.num_machines);
}

}  // namespace tessera::tp
