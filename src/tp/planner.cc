// The tensor-parallel cost-model timeline and planner (planner.h).
#include "tessera/tp/planner.h"

#include <algorithm>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/tp/tune_table.h"

namespace tessera::tp {

namespace {

// The links an operation on `topology` uses: inside a machine and across machines.
struct Links {
  sp::LinkCost intra;
  sp::LinkCost cross;
  bool intra_is_nvlink = true;
};

Links links_of(const Topology& topology, const sp::CostModel& cost) {
  Links l;
  const int machines = topology.num_machines();
  const int g = topology.world_size / std::max(machines, 1);
  LinkClass intra = LinkClass::kNVLink, cross = LinkClass::kNetwork;
  if (g > 1) intra = topology.link(0, 1);
  if (machines > 1) cross = topology.link(0, g);
  l.intra = cost.link(intra);
  l.cross = cost.link(cross);
  l.intra_is_nvlink = intra == LinkClass::kNVLink;
  return l;
}

// A link of one GPU that carries transfers one after another, each `per_transfer_us` beyond
// its bytes.
struct LinkQueue {
  sp::LinkCost cost;
  double per_transfer_us = 0;
  double free_at = 0;
  // Carries `bytes` ready at `ready`; returns when the last byte arrives.
  double carry(double ready, double bytes) {
    // Nothing to carry takes no time, even on a link of no bandwidth (0 / 0 would be NaN).
    free_at = std::max(free_at, ready) +
              (bytes > 0 ? per_transfer_us + bytes / (cost.bandwidth_gbps * 1e3) : 0.0);
    return free_at + cost.latency_us;
  }
};

double collective_us(const TpRequest& r, double total_bytes, const Links& l,
                     const sp::CostModel& cost) {
  const int p = r.world_size;
  if (p == 1) return 0;
  const double bw = r.num_machines > 1 ? std::min(l.intra.bandwidth_gbps, l.cross.bandwidth_gbps)
                                       : l.intra.bandwidth_gbps;
  const double latency = r.num_machines > 1 ? l.cross.latency_us : l.intra.latency_us;
  const double transfer_us = total_bytes > 0 ? double(p - 1) / p * total_bytes / (bw * 1e3) : 0.0;
  return cost.two_sided_step_us + latency + transfer_us;
}

TpEstimate estimate_all_gather(const TpPlan& plan, const Links& l, const sp::CostModel& cost) {
  const TpRequest& r = plan.request;
  const int p = r.world_size, g = p / r.num_machines, rank = 0;
  const int elem = int(dtype_size(r.dtype));
  const double row_bytes = double(r.k) * elem;
  TpEstimate e;
  e.gemm_us = cost.gemm_us(r.m, r.n / p, r.k, elem);
  e.comm_us = collective_us(r, double(r.m) * row_bytes, l, cost);
  e.unfused_us = e.comm_us + e.gemm_us;
  const double per_row = (e.gemm_us - cost.launch_us) * (1 + cost.gemm_fused_slowdown) / r.m;
  // Each chunk is a copy-engine transfer with its signal.
  LinkQueue intra{l.intra, cost.copy_chunk_us}, cross{l.cross, cost.copy_chunk_us};
  // Ring: every shard passes every link of the ring, the slowest sets the pace.
  if (plan.route == Route::kRing && r.num_machines > 1)
    intra.cost =
        cross.cost = {std::min(l.intra.bandwidth_gbps, l.cross.bandwidth_gbps), l.cross.latency_us};
  std::vector<double> forwarded_ready(size_t(p), 0);  // two-level: when the forwarder has it
  double t = cost.launch_us + cost.fused_call_us;
  for (int source : gather_order(plan, rank)) {
    const bool remote = source / g != rank / g;
    for (int64_t c = 0; c < num_chunks(plan, source); ++c) {
      const double bytes = double(chunk_rows(plan, source, c).count) * row_bytes;
      double arrival = 0;
      if (source != rank) {
        if (plan.two_level && remote && source % g != rank % g) {
          // Crossed to this machine's rank of its local index, then forwarded here.
          arrival = intra.carry(cross.carry(0, bytes), bytes);
        } else {
          arrival = (remote && plan.route != Route::kRing ? cross : intra).carry(0, bytes);
        }
      }
      t = std::max(t, arrival) + double(chunk_rows(plan, source, c).count) * per_row;
    }
  }
  e.fused_us = t;
  return e;
}

TpEstimate estimate_scatter(const TpPlan& plan, const Links& l, const sp::CostModel& cost) {
  const TpRequest& r = plan.request;
  const int p = r.world_size, g = p / r.num_machines, rank = 0;
  const int elem = int(dtype_size(r.dtype)), out_elem = int(dtype_size(r.out_dtype));
  const bool rs = r.op == TpOp::kGemmReduceScatter;
  const RowRange mine = row_range(r.m, p, rank);
  TpEstimate e;
  // Rows x columns this rank computes; what it sends each owner.
  const int64_t rows = rs ? r.m : mine.count, cols = r.n;
  e.gemm_us = cost.gemm_us(rows, cols, rs ? r.k / p : r.k, elem);
  const double out_bytes = double(rows) * double(cols) * out_elem;
  e.comm_us = collective_us(r, out_bytes, l, cost);
  e.unfused_us = e.gemm_us + e.comm_us;
  LinkQueue intra{l.intra}, cross{l.cross};
  double t = cost.launch_us + cost.fused_call_us, last_arrival = 0, relay_bytes = 0;
  for (int owner : owner_order(plan, rank)) {
    // ReduceScatter: the owner's rows, all columns; AllToAll: all rows, the owner's columns.
    const double block_rows = rs ? double(row_range(r.m, p, owner).count) : double(rows);
    const double fraction = rs ? block_rows / double(rows) : 1.0 / p;
    // An owner with no rows costs nothing (0 x an infinite GEMM time would be NaN).
    if (fraction > 0) t += fraction * (e.gemm_us - cost.launch_us) * (1 + cost.gemm_fused_slowdown);
    const double bytes = rs ? block_rows * cols * out_elem : out_bytes / p;
    if (owner == rank) continue;
    const bool remote = owner / g != rank / g;
    if (plan.two_level && remote) {
      relay_bytes += bytes;
      last_arrival = std::max(last_arrival, intra.carry(t, bytes));
    } else {
      last_arrival = std::max(last_arrival, (remote ? cross : intra).carry(t, bytes));
    }
  }
  double done = std::max(t, last_arrival);
  if (plan.two_level && relay_bytes > 0) {
    // The relay sums its machine's partials for the other machines, then one sum crosses each.
    const double machine_bytes = relay_bytes / std::max(g - 1, 1);
    done = cross.carry(done + cost.state_pass_us(int64_t(relay_bytes * 2)), machine_bytes);
  }
  if (rs) {
    const double share_bytes = double(mine.count) * cols * out_elem;
    done += cost.state_pass_us(int64_t(share_bytes * (p + 1)));
  }
  e.fused_us = done;
  return e;
}

}  // namespace

double TpEstimate::overlap_efficiency() const {
  const double exposed_unfused = unfused_us - gemm_us;
  if (exposed_unfused <= 0) return 0;
  return 1.0 - (fused_us - gemm_us) / exposed_unfused;
}

TpEstimate estimate(const TpPlan& plan, const Topology& topology, const sp::CostModel& cost) {
  validate_request(plan.request);
  TESSERA_CHECK_ARG(topology.world_size == plan.request.world_size, "topology of ",
                    topology.world_size, " ranks for a plan of ", plan.request.world_size,
                    ": expected the same");
  const Links l = links_of(topology, cost);
  TpEstimate e = plan.request.op == TpOp::kAllGatherGemm ? estimate_all_gather(plan, l, cost)
                                                         : estimate_scatter(plan, l, cost);
  if (plan.request.world_size == 1) e.fused_us = e.unfused_us = e.gemm_us;
  return e;
}

TpPlan plan_tp(const TpRequest& request, const Topology& topology, const sp::CostModel& cost,
               const TpPlanOptions& options) {
  validate_request(request);
  cost.validate();
  // The heap's slots (1024 today); the bound keeps a plan's chunk count, which its timeline
  // and executor walk, within what a heap can signal.
  constexpr int kMaxSignalSlots = 1 << 16;
  TESSERA_CHECK_ARG(options.num_signal_slots >= 1 && options.num_signal_slots <= kMaxSignalSlots,
                    "num_signal_slots = ", options.num_signal_slots, ": expected 1 to ",
                    kMaxSignalSlots, " (the heap's SymmetricHeap::num_signal_slots())");
  TESSERA_CHECK_ARG(options.comm_rows >= -1, "comm_rows = ", options.comm_rows,
                    ": expected -1 (the planner's pick), 0 (a whole shard) or rows >= 1");
  TESSERA_CHECK_ARG(
      topology.world_size == request.world_size && topology.num_machines() == request.num_machines,
      "topology of ", topology.world_size, " ranks in ", topology.num_machines(),
      " machines: expected the request's ", request.world_size, " in ", request.num_machines);
  const Links l = links_of(topology, cost);
  TpPlan base;
  base.request = request;
  base.tile_m = options.tile_m;
  base.tile_n = options.tile_n;
  // Direct sends where every pair has its own link (NVLink/NVSwitch), a ring where they share.
  base.route = l.intra_is_nvlink || request.world_size <= 2 ? Route::kDirect : Route::kRing;

  std::vector<TpPlan> candidates;
  for (bool two_level : {false, true}) {
    if (two_level && (request.num_machines == 1 || request.op == TpOp::kGemmAllToAll)) continue;
    TpPlan p = base;
    p.two_level = two_level;
    if (two_level) p.route = Route::kDirect;
    if (request.op != TpOp::kAllGatherGemm) {
      candidates.push_back(p);
      continue;
    }
    // The paper's search: from a whole shard, halving down to the GEMM tile.
    const int64_t share = (request.m + request.world_size - 1) / request.world_size;
    std::vector<int64_t> rows;
    if (options.comm_rows >= 0) {
      rows.push_back(options.comm_rows);
    } else {
      for (int64_t c = share; c >= std::max<int64_t>(1, std::min<int64_t>(share, options.tile_m));
           c /= 2) {
        rows.push_back(c);
        if (c == 1) break;
      }
    }
    for (int64_t c : rows) {
      p.comm_rows = c;
      if (num_signal_slots(p) <= options.num_signal_slots) candidates.push_back(p);
    }
  }
  TESSERA_CHECK_ARG(!candidates.empty(), "comm_rows = ", options.comm_rows,
                    ": needs more than the ", options.num_signal_slots,
                    " signal slots of the heap");
  // Candidates come largest chunk first; a smaller one must save 1%: where the GEMM hides the
  // communication either way, fewer chunks cost the copy engines less (bench tp measured
  // 128-row chunks 25% slower than 512-row ones on Llama-3-70B QKV at M 4096, 4 H200).
  TpPlan best = candidates.front();
  TpEstimate best_e = estimate(best, topology, cost);
  for (size_t i = 1; i < candidates.size(); ++i) {
    const TpEstimate e = estimate(candidates[i], topology, cost);
    if (e.fused_us < 0.99 * best_e.fused_us) {
      best = candidates[i];
      best_e = e;
    }
  }
  best.gemm_us = best_e.gemm_us;
  best.fused_us = best_e.fused_us;
  best.unfused_us = best_e.unfused_us;
  const bool fusion_wins = best_e.fused_us < best_e.unfused_us;
  switch (options.fuse) {
    case TpPlanOptions::Fuse::kFused:
      best.fused = true;
      break;
    case TpPlanOptions::Fuse::kUnfused:
      best.fused = false;
      break;
    case TpPlanOptions::Fuse::kAuto:
      best.fused = fusion_wins && request.world_size > 1;
      break;
  }
  best.reason = str(request.world_size == 1 ? "one rank: nothing to communicate; " : "",
                    "cost model: fused ", best_e.fused_us, " us vs GEMM + collective ",
                    best_e.unfused_us, " us (GEMM alone ", best_e.gemm_us, " us)",
                    options.fuse != TpPlanOptions::Fuse::kAuto ? ", forced by the caller" : "");
  if (options.fuse == TpPlanOptions::Fuse::kAuto && !options.tuned_gpu.empty() &&
      request.world_size > 1) {
    const std::string path = tp_tune_table_path();
    if (const auto row = tuned_row(read_tp_tune_table(path), options.tuned_gpu, request)) {
      best.fused = row->fused_us < row->unfused_us;
      best.reason = str("tuning table ", path, " (", options.tuned_gpu, ", M ", row->m,
                        "): fused ", row->fused_us, " us vs unfused ", row->unfused_us,
                        " us measured; ", best.reason);
    }
  }
  validate_plan(best, options.num_signal_slots);
  return best;
}

}  // namespace tessera::tp
