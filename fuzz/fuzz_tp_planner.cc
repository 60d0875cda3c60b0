// Fuzzes the tensor-parallel planner (tp::plan_tp) with requests, topologies, options and
// cost-model terms decoded from the input: it either refuses with tessera::Error, or returns a
// plan for the request that validate_plan accepts within the signal budget, whose estimate is
// finite and whose tile schedules cover every rank's output exactly once, each tile inside one
// rank's share, with communication tiles covering every share. Anything else (another
// exception, a crash, UB) is a finding.
#include <cmath>
#include <exception>
#include <vector>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/tp/planner.h"

using namespace tessera;

namespace {

tp::TpRequest decode_request(FuzzedDataProvider& in) {
  tp::TpRequest r;
  r.op = tp::TpOp(in.ConsumeIntegralInRange<int>(0, 2));
  r.world_size = fuzz::draw_int(in, 1, 16);
  r.num_machines = fuzz::draw_int(in, 1, 4);
  r.m = fuzz::draw(in, 1, 4096);
  r.n = fuzz::draw(in, 1, 512);
  r.k = fuzz::draw(in, 1, 512);
  constexpr DType kDtypes[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kU8, DType::kI64};
  r.dtype = kDtypes[in.ConsumeIntegralInRange<size_t>(0, 4)];
  r.out_dtype = kDtypes[in.ConsumeIntegralInRange<size_t>(0, 4)];
  r.weight_layout = in.ConsumeBool() ? tp::WeightLayout::kKN : tp::WeightLayout::kNK;
  r.has_bias = in.ConsumeBool();
  return r;
}

// machines x (ranks / machines) with NVLink or PCIe inside and a network or emulated link
// across, as runs build them; or a topology whose size disagrees with the request.
Topology decode_topology(FuzzedDataProvider& in, const tp::TpRequest& r) {
  const int ranks = int(std::clamp<int64_t>(int64_t(r.world_size) + (in.ConsumeIntegralInRange<int>(0, 15) == 0), 1, 64));
  const int machines = ranks % std::max(r.num_machines, 1) == 0 ? std::max(r.num_machines, 1) : 1;
  Topology t = cpu_topology(ranks, machines);
  const LinkClass inside = in.ConsumeBool() ? LinkClass::kNVLink : LinkClass::kPCIe;
  const LinkClass across = in.ConsumeBool() ? LinkClass::kNetwork : LinkClass::kEmulatedNetwork;
  const int g = ranks / machines;
  for (int a = 0; a < ranks; ++a) {
    for (int b = 0; b < ranks; ++b) {
      t.links[size_t(a * ranks + b)] =
          a == b ? LinkClass::kSelf : (a / g == b / g ? inside : across);
    }
  }
  return t;
}

// extreme_cost: a cost term was set past 1e9 or below 1e-6 (us, GB/s or TFLOP/s), where times
// may overflow to infinity.
void check_plan(const tp::TpRequest& request, const tp::TpPlan& plan,
                const tp::TpPlanOptions& options, const Topology& topology,
                const sp::CostModel& cost, bool extreme_cost) {
  const std::string what = describe(request) + " -> " + tp::describe(plan);
  const tp::TpRequest& r = plan.request;
  if (r.op != request.op || r.m != request.m || r.n != request.n || r.k != request.k ||
      r.world_size != request.world_size || r.num_machines != request.num_machines) {
    fuzz::fail("plan for another request: " + what);
  }
  try {
    tp::validate_plan(plan, options.num_signal_slots);
  } catch (const Error& e) {
    fuzz::fail(str("validate_plan refuses the planner's plan: ", e.what(), "\n", what));
  }
  const tp::TpEstimate e = tp::estimate(plan, topology, cost);
  if ((!extreme_cost && (!std::isfinite(e.fused_us) || !std::isfinite(e.unfused_us))) ||
      !(e.gemm_us >= 0) || !(e.fused_us >= 0)) {
    fuzz::fail(str("estimate not finite: fused ", e.fused_us, " unfused ", e.unfused_us, "\n", what));
  }
  // Schedules: small problems only (the check visits every output element).
  const int p = r.world_size;
  if (r.m * r.n > (int64_t(1) << 18)) return;
  for (int rank = 0; rank < p; ++rank) {
    const tp::RankShapes s = tp::rank_shapes(r, rank);
    const bool a2a = r.op == tp::TpOp::kGemmAllToAll, rs = r.op == tp::TpOp::kGemmReduceScatter;
    const int64_t rows = a2a ? s.a_rows : (rs ? r.m : s.out_rows);
    const int64_t cols = a2a ? r.n : s.out_cols;
    std::vector<uint8_t> covered(size_t(rows * cols), 0);
    for (const tp::TileTask& t : tp::tile_schedule(plan, rank)) {
      if (t.rows < 1 || t.cols < 1 || t.row_begin < 0 || t.col_begin < 0 ||
          t.row_begin + t.rows > rows || t.col_begin + t.cols > cols) {
        fuzz::fail(str("rank ", rank, ": tile rows ", t.row_begin, "+", t.rows, " cols ",
                       t.col_begin, "+", t.cols, " outside [", rows, ", ", cols, "]\n", what));
      }
      if (!a2a) {
        const tp::RowRange share = tp::row_range(r.m, p, t.block);
        if (t.row_begin < share.begin || t.row_begin + t.rows > share.begin + share.count) {
          fuzz::fail(str("rank ", rank, ": a tile straddles rank ", t.block, "'s rows\n", what));
        }
      }
      for (int64_t i = 0; i < t.rows; ++i) {
        for (int64_t j = 0; j < t.cols; ++j) {
          uint8_t& c = covered[size_t((t.row_begin + i) * cols + t.col_begin + j)];
          if (c++) fuzz::fail(str("rank ", rank, ": an output element computed twice\n", what));
        }
      }
    }
    for (uint8_t c : covered) {
      if (!c) fuzz::fail(str("rank ", rank, ": an output element never computed\n", what));
    }
    if (r.op == tp::TpOp::kAllGatherGemm) {
      int64_t next = tp::row_range(r.m, p, rank).begin;
      for (int64_t c = 0; c < tp::num_chunks(plan, rank); ++c) {
        const tp::RowRange chunk = tp::chunk_rows(plan, rank, c);
        if (chunk.begin != next || chunk.count < 1) fuzz::fail(str("chunk ", c, " misplaced\n", what));
        next += chunk.count;
      }
      const tp::RowRange share = tp::row_range(r.m, p, rank);
      if (next != share.begin + share.count) fuzz::fail("chunks do not cover the share\n" + what);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  try {
    const tp::TpRequest request = decode_request(in);
    const Topology topology = decode_topology(in, request);
    sp::CostModel cost = sp::CostModel::for_topology(topology);
    bool extreme_cost = false;
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
      const char* terms[] = {"gemm_tflops", "gemm_m_half", "gemm_fused_slowdown", "nvlink_gbps",
                             "network_gbps", "launch_us", "hbm_gbps"};
      const double value = fuzz::draw_double(in);
      extreme_cost = !(std::fabs(value) < 1e9 && std::fabs(value) > 1e-6);
      cost.set(terms[in.ConsumeIntegralInRange<size_t>(0, 6)], value);
    }
    tp::TpPlanOptions options;
    options.fuse = tp::TpPlanOptions::Fuse(in.ConsumeIntegralInRange<int>(0, 2));
    options.comm_rows = in.ConsumeBool() ? -1 : fuzz::draw(in, 0, 256);
    options.tile_m = fuzz::draw_int(in, 1, 256);
    options.tile_n = fuzz::draw_int(in, 1, 256);
    options.num_signal_slots = fuzz::draw_int(in, 1, 1024);
    const tp::TpPlan plan = tp::plan_tp(request, topology, cost, options);
    check_plan(request, plan, options, topology, cost, extreme_cost);
  } catch (const Error&) {
    // A refusal is an answer.
  }
  return 0;
}
