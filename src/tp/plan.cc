// TpPlan: checks, tile schedules, communication orders and signal slots (plan.h).
#include "tessera/tp/plan.h"

#include <algorithm>

#include "../sp/json_writer.h"
#include "tessera/core/error.h"

namespace tessera::tp {

const char* transfer_name(Transfer transfer) {
  return transfer == Transfer::kPush ? "push" : "pull";
}
const char* route_name(Route route) {
  return route == Route::kDirect ? "direct" : "ring";
}

namespace {

int wrap(int index, int size) {
  return ((index % size) + size) % size;
}

int64_t rows_per_chunk(const TpPlan& plan, int source) {
  const int64_t share = row_range(plan.request.m, plan.request.world_size, source).count;
  return plan.comm_rows > 0 ? plan.comm_rows : std::max<int64_t>(share, 1);
}

int total_chunks(const TpPlan& plan) {
  int64_t total = 0;
  for (int s = 0; s < plan.request.world_size; ++s) total += num_chunks(plan, s);
  return int(std::min<int64_t>(total, int64_t(1) << 30));
}

// The slots of the protocol itself, before the released words.
int protocol_signal_slots(const TpPlan& plan) {
  const int p = plan.request.world_size;
  switch (plan.request.op) {
    case TpOp::kAllGatherGemm:
      return total_chunks(plan) + (plan.transfer == Transfer::kPull ? p : 0);
    case TpOp::kGemmReduceScatter:
      return plan.two_level ? 2 * p : p;
    case TpOp::kGemmAllToAll:
      return p;
  }
  return 0;
}

}  // namespace

void validate_plan(const TpPlan& plan, int num_slots) {
  validate_request(plan.request);
  const TpRequest& r = plan.request;
  TESSERA_CHECK_ARG(plan.tile_m >= 1, "tile_m = ", plan.tile_m, ": expected >= 1");
  TESSERA_CHECK_ARG(plan.tile_n >= 1, "tile_n = ", plan.tile_n, ": expected >= 1");
  TESSERA_CHECK_ARG(plan.comm_rows >= 0, "comm_rows = ", plan.comm_rows,
                    ": expected >= 0 (0: a whole shard per communication tile)");
  TESSERA_CHECK_ARG(!(plan.route == Route::kRing && plan.transfer == Transfer::kPull),
                    "route = ring with transfer = pull: expected push (a ring relays pushes)");
  if (plan.two_level) {
    TESSERA_CHECK_ARG(r.num_machines > 1, "two_level = true: expected num_machines > 1, got ",
                      r.num_machines);
    TESSERA_CHECK_ARG(r.op != TpOp::kGemmAllToAll,
                      "two_level = true: expected op ag_gemm or gemm_rs, got gemm_a2a");
    TESSERA_CHECK_ARG(plan.transfer == Transfer::kPush && plan.route == Route::kDirect,
                      "two_level = true: expected transfer push and route direct, got ",
                      transfer_name(plan.transfer), " and ", route_name(plan.route));
  }
  if (plan.fused) {
    TESSERA_CHECK_ARG(num_signal_slots(plan) <= num_slots, "comm_rows = ", plan.comm_rows,
                      ": the plan needs ", num_signal_slots(plan),
                      " signal slots but the heap has ", num_slots,
                      ": expected larger communication tiles");
  }
}

std::vector<int> gather_order(const TpPlan& plan, int rank) {
  const int p = plan.request.world_size;
  std::vector<int> order;
  order.reserve(p);
  if (plan.two_level) {
    const int machines = plan.request.num_machines, g = p / machines;
    const int machine = rank / g, local = rank % g;
    for (int dm = 0; dm < machines; ++dm) {
      const int m = wrap(machine - dm, machines);
      for (int dl = 0; dl < g; ++dl) order.push_back(m * g + wrap(local - dl, g));
    }
    return order;
  }
  const int step = plan.transfer == Transfer::kPull ? 1 : -1;
  for (int i = 0; i < p; ++i) order.push_back(wrap(rank + step * i, p));
  return order;
}

std::vector<int> owner_order(const TpPlan& plan, int rank) {
  const int p = plan.request.world_size;
  std::vector<int> order;
  order.reserve(p);
  for (int i = 1; i <= p; ++i) order.push_back(wrap(rank + i, p));
  return order;
}

std::vector<TileTask> tile_schedule(const TpPlan& plan, int rank) {
  const TpRequest& r = plan.request;
  const int p = r.world_size;
  std::vector<TileTask> tiles;
  auto add_rows = [&](int block, int64_t row_begin, int64_t rows, int64_t col_begin, int64_t cols) {
    for (int64_t i = 0; i < rows; i += plan.tile_m) {
      for (int64_t j = 0; j < cols; j += plan.tile_n) {
        tiles.push_back({block, row_begin + i, std::min<int64_t>(plan.tile_m, rows - i),
                         col_begin + j, std::min<int64_t>(plan.tile_n, cols - j)});
      }
    }
  };
  switch (r.op) {
    case TpOp::kAllGatherGemm:
      for (int source : gather_order(plan, rank)) {
        const RowRange share = row_range(r.m, p, source);
        add_rows(source, share.begin, share.count, 0, r.n / p);
      }
      break;
    case TpOp::kGemmReduceScatter:
      for (int owner : owner_order(plan, rank)) {
        const RowRange share = row_range(r.m, p, owner);
        add_rows(owner, share.begin, share.count, 0, r.n);
      }
      break;
    case TpOp::kGemmAllToAll: {
      const int64_t rows = row_range(r.m, p, rank).count;
      for (int owner : owner_order(plan, rank))
        add_rows(owner, 0, rows, owner * (r.n / p), r.n / p);
      break;
    }
  }
  return tiles;
}

int64_t num_chunks(const TpPlan& plan, int source) {
  const int64_t share = row_range(plan.request.m, plan.request.world_size, source).count;
  const int64_t per = rows_per_chunk(plan, source);
  return share == 0 ? 0 : 1 + (share - 1) / per;  // no share + per: comm_rows may be near 2^63
}

RowRange chunk_rows(const TpPlan& plan, int source, int64_t chunk) {
  const RowRange share = row_range(plan.request.m, plan.request.world_size, source);
  const int64_t per = rows_per_chunk(plan, source);
  const int64_t begin = chunk * per;
  return {share.begin + begin, std::max<int64_t>(0, std::min(per, share.count - begin))};
}

int64_t chunk_of_row(const TpPlan& plan, int source, int64_t row) {
  const RowRange share = row_range(plan.request.m, plan.request.world_size, source);
  return (row - share.begin) / rows_per_chunk(plan, source);
}

int chunk_signal(const TpPlan& plan, int source, int64_t chunk) {
  int64_t base = 0;
  for (int s = 0; s < source; ++s) base += num_chunks(plan, s);
  return int(base + chunk);
}

int ready_signal(const TpPlan& plan, int source) {
  return total_chunks(plan) + source;
}
int count_signal(const TpPlan&, int source) {
  return source;
}
int relay_signal(const TpPlan& plan, int source) {
  return plan.request.world_size + source;
}

int released_signal(const TpPlan& plan, int consumer) {
  return protocol_signal_slots(plan) + consumer;
}

int num_signal_slots(const TpPlan& plan) {
  return protocol_signal_slots(plan) + plan.request.world_size;
}

std::string describe(const TpPlan& plan) {
  if (!plan.fused) return str("unfused (GEMM + NCCL): ", plan.reason);
  std::string text = str("fused tile ", plan.tile_m, "x", plan.tile_n);
  if (plan.request.op == TpOp::kAllGatherGemm) {
    text += str(" comm_rows ", plan.comm_rows == 0 ? std::string("shard") : str(plan.comm_rows),
                " ", transfer_name(plan.transfer), " ", route_name(plan.route));
  }
  if (plan.two_level) text += " two-level";
  return text;
}

std::string plan_to_json(const TpPlan& plan) {
  const TpRequest& r = plan.request;
  sp::detail::JsonWriter w;
  w.begin_object();
  w.key("op").value(tp_op_name(r.op));
  w.key("m").value(r.m).key("n").value(r.n).key("k").value(r.k);
  w.key("dtype").value(dtype_name(r.dtype)).key("out_dtype").value(dtype_name(r.out_dtype));
  w.key("weight_layout").value(weight_layout_name(r.weight_layout));
  w.key("bias").value(r.has_bias);
  w.key("world_size").value(r.world_size).key("num_machines").value(r.num_machines);
  w.key("fused").value(plan.fused).key("reason").value(plan.reason);
  w.key("tile_m").value(plan.tile_m).key("tile_n").value(plan.tile_n);
  w.key("comm_rows").value(plan.comm_rows);
  w.key("transfer").value(transfer_name(plan.transfer));
  w.key("route").value(route_name(plan.route));
  w.key("two_level").value(plan.two_level);
  w.key("gemm_us").value(plan.gemm_us).key("fused_us").value(plan.fused_us);
  w.key("unfused_us").value(plan.unfused_us);
  w.end_object();
  return w.str();
}

}  // namespace tessera::tp
