// StreamFusion planners (streamfusion.txt): TAS and Torus Attention, two-sided and one-sided.
//
// TAS (section 4.2): the N x M GPUs form a Pu x Pr grid with Pu = gcd(N * M, H): Ulysses
// groups spread across machines, Ring groups inside a machine (streamfusion_grid). The
// schedule is the Ulysses/Ring one of sequence_grid (all-to-all, ring pass, all-to-all back).
//
// Torus (sections 4.3, 4.4): each Ulysses group is T machines x P'u ranks. Rank (t, u', r)
// owns query head group u = t * P'u + u' of its group. Its super-chunk splits by machine into
// blocks t'' (the tokens of that machine's group members). Block t is stationary after an
// intra-machine exchange; the others cross machines in stages:
//   exchange   P'u-way exchange of block t inside the machine (all-to-all or scatter-push),
//              then (one-sided) BarrierAll
//   transfers  Q of blocks t-1, ..., t-T+1, then their KV (two-sided: stage k sends own rows
//              to the machine t+k and receives from t-k; one-sided: all gather-pulls issued
//              at once, Q first: the paper schedules Q before KV because KV is twice as large)
//   Pull Q     stage 1: Q_t x KV_t; stage k+1: Q_{t-k} x KV_t (each a ring pass over KV_t)
//   Pull KV    stage k: every Q block but Q_t x KV_{t-k} (a ring pass; one-sided, after a
//              Barrier of the ring group so every member's pull of KV_{t-k} has landed)
//   Push O     stage k: finalize O_{t-k} and send it to its owners while computing
//              Q_t x KV_{t-k} (a ring pass)
//   last       finalize O_t, exchange it inside the machine; joint output all-gather;
//              (one-sided) BarrierAll.
// Streams: 0 compute, 1 Ulysses/Torus traffic ("other"), 2 ring traffic, as in the paper's
// appendix A. Joint tokens: the joint query share of the rank attends every KV block as it
// passes (stage 1 and the Pull KV stages) and every Q block attends the joint KV at its first
// stage.
#include <functional>
#include <numeric>

#include "plan_builder.h"
#include "planner_common.h"
#include "sequence_grid.h"
#include "tessera/core/error.h"

namespace tessera::sp {

namespace {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

int default_pu(const PlanRequest& request, const AttentionShape& shape) {
  int pu = request.options.ulysses_degree;
  if (pu == 0) pu = std::gcd(request.topology.world_size, shape.heads);
  TESSERA_CHECK_ARG(pu >= 1 && request.topology.world_size % pu == 0,
                    "ulysses_degree = ", request.options.ulysses_degree,
                    ": expected a divisor of the ", request.topology.world_size, " ranks");
  return pu;
}

// T (machines per Ulysses group) when every group is T machines x Pu/T ranks in machine-major
// member order, else 0.
int torus_degree(const detail::Grid& grid, const Topology& topo) {
  const auto& row0 = grid.rows[0];
  std::vector<int> machines;
  for (int x : row0) {
    if (machines.empty() || machines.back() != topo.machine_of_rank[x]) {
      machines.push_back(topo.machine_of_rank[x]);
    }
  }
  const int T = int(machines.size());
  if (grid.pu % T != 0) return 0;
  const int per = grid.pu / T;
  for (const auto& row : grid.rows) {
    std::vector<int> seen;
    for (int u = 0; u < grid.pu; ++u) {
      const int m = topo.machine_of_rank[row[u]];
      if (u % per == 0) {
        if (std::find(seen.begin(), seen.end(), m) != seen.end()) return 0;
        seen.push_back(m);
      } else if (m != seen.back()) {
        return 0;
      }
    }
  }
  return T;
}

}  // namespace

Plan plan_tas(const PlanRequest& request) {
  const AttentionShape shape = request.shape();
  const TokenLayout layout = detail::resolve_layout(request, Method::kTas);
  const Topology& topo = request.topology;
  const int pu = default_pu(request, shape);
  detail::check_head_groups(shape, pu, "tas");
  detail::PlanBuilder b("tas", shape, topo, layout, request.options.comm, 2);
  const detail::Grid grid = detail::streamfusion_grid(topo, pu);
  b.param("Pu", std::to_string(pu));
  b.param("Pr", std::to_string(topo.world_size / pu));
  b.note(str("Pu = ", request.options.ulysses_degree ? "requested " : "gcd(N*M, H) = ", pu,
             ": Ulysses across machines, Ring over ", topo.world_size / pu,
             " ranks inside a machine; grid ", grid.to_string()));
  detail::plan_ulysses_ring(b, grid, request.options.comm == CommMode::kOneSided);
  return b.finish();
}

Plan plan_torus(const PlanRequest& request) {
  const AttentionShape shape = request.shape();
  const TokenLayout layout = detail::resolve_layout(request, Method::kTorus);
  const Topology& topo = request.topology;
  const int P = topo.world_size;
  const int pu = default_pu(request, shape);
  detail::check_head_groups(shape, pu, "torus");
  const detail::Grid grid = detail::streamfusion_grid(topo, pu);
  const int T = torus_degree(grid, topo);
  TESSERA_CHECK(T >= 1, ErrorCode::kUnsupported, "torus: Ulysses groups ", grid.to_string(),
                " are not T machines x Pu/T ranks (Pu = ", pu,
                "); use tas, or a Ulysses degree that is a multiple of the machine count");
  const int per = pu / T;  // P'u: Ulysses degree inside a machine
  const bool one_sided = request.options.comm == CommMode::kOneSided;
  constexpr int kOther = 1;
  constexpr int kRing = 2;
  detail::PlanBuilder b("torus", shape, topo, layout, request.options.comm, 3);
  detail::GridPlanner gp(b, grid, kOther, kRing);
  b.param("Pu", std::to_string(pu));
  b.param("Pr", std::to_string(grid.pr));
  b.param("T", std::to_string(T));
  b.note(str("Torus over T = ", T, " machines x P'u = ", per, " ranks per Ulysses group, ring of ",
             grid.pr, " inside each machine; grid ", grid.to_string()));

  std::vector<int> all(P);
  std::iota(all.begin(), all.end(), 0);
  auto block = [&](int t) {
    std::vector<int> members(per);
    std::iota(members.begin(), members.end(), t * per);
    return members;
  };
  auto t_of = [&](int x) { return grid.u_of[x] / per; };
  auto block_ranks = [&](int x, int t) {
    std::vector<int> ranks;
    for (int m : block(t)) ranks.push_back(grid.at(m, grid.r_of[x]));
    return detail::sorted_ranks(ranks);
  };
  // Q work of rank x for block t'' (its q tiles with their state tiles).
  auto q_block = [&](int x, int t) {
    std::vector<detail::RingWork> work;
    for (int m : block(t)) {
      const auto q = gp.q_tiles(x, m);
      const auto st = gp.state_tiles(x, m);
      for (size_t k = 0; k < q.size(); ++k) work.push_back({q[k], st[k]});
    }
    return work;
  };
  auto kv_block = [&](int x, int t) {
    std::vector<detail::TileRef> tiles;
    for (int m : block(t)) {
      for (const auto& tile : gp.kv_tiles(x, m)) tiles.push_back(tile);
    }
    return tiles;
  };
  auto append = [](std::vector<detail::RingWork>& a, const std::vector<detail::RingWork>& more) {
    a.insert(a.end(), more.begin(), more.end());
  };
  // A ring pass for every ring: work(x) and kv block t_kv(x) per member.
  auto passes = [&](const std::function<std::vector<detail::RingWork>(int)>& work_of,
                    const std::function<int(int)>& kv_block_of, const std::string& note) {
    for (int u = 0; u < grid.pu; ++u) {
      std::vector<std::vector<detail::TileRef>> chunks(grid.pr);
      std::vector<std::vector<detail::RingWork>> work(grid.pr);
      for (int r = 0; r < grid.pr; ++r) {
        const int x = grid.at(u, r);
        chunks[r] = kv_block(x, kv_block_of(x));
        work[r] = work_of(x);
      }
      gp.ring_pass(u, chunks, work, one_sided, note);
    }
  };

  // Exchange of the stationary block inside each machine.
  if (per > 1) {
    std::vector<std::vector<int>> targets(P), groups(P);
    for (int x = 0; x < P; ++x) {
      targets[x] = block(t_of(x));
      groups[x] = block_ranks(x, t_of(x));
    }
    gp.exchange_inputs(all, targets, groups, one_sided, "stationary exchange of q, k, v");
  }
  if (one_sided && P > 1) {
    for (int x = 0; x < P; ++x) {
      gp.barrier(x, all, gp.ua_input_regions(x), false, kOther, "barrier all: inputs in place");
    }
  }
  // Cross-machine transfers of Q blocks first, then KV blocks.
  for (int part = 0; part < 2; ++part) {
    const bool q = part == 0;
    for (int k = 1; k < T; ++k) {
      const std::string note = str(q ? "pull q" : "pull kv", " stage ", k);
      if (one_sided) {
        for (int x = 0; x < P; ++x) gp.pull_inputs(x, block(mod(t_of(x) - k, T)), q, !q, note);
      } else {
        std::vector<std::vector<int>> targets(P);
        for (int x = 0; x < P; ++x) targets[x] = block(mod(t_of(x) + k, T));
        gp.exchange_inputs(all, targets, {}, false, note, q, !q);
      }
    }
  }
  // Pull Q stage 1: the stationary block (and the joint queries) against KV_t; every Q
  // block meets the joint KV at its first stage.
  for (int x = 0; x < P; ++x) {
    std::vector<detail::RingWork> work = q_block(x, t_of(x));
    append(work, gp.joint_work(x));
    gp.attend_joint_kv(x, work, "pull q stage 1: joint kv");
  }
  passes(
      [&](int x) {
        std::vector<detail::RingWork> work = q_block(x, t_of(x));
        append(work, gp.joint_work(x));
        return work;
      },
      [&](int x) { return t_of(x); }, "pull q stage 1");
  // Pull Q stages 2..T: Q_{t-k} against the stationary KV_t.
  for (int k = 1; k < T; ++k) {
    for (int x = 0; x < P; ++x) {
      gp.attend_joint_kv(x, q_block(x, mod(t_of(x) - k, T)),
                         str("pull q stage ", k + 1, ": joint kv"));
    }
    passes([&](int x) { return q_block(x, mod(t_of(x) - k, T)); }, [&](int x) { return t_of(x); },
           str("pull q stage ", k + 1));
  }
  // Pull KV stages: every non-stationary Q block (and the joint queries) against KV_{t-k}.
  for (int k = 1; k < T; ++k) {
    if (one_sided && grid.pr > 1) {
      for (int x = 0; x < P; ++x) {
        std::vector<int> ring;
        for (int r = 0; r < grid.pr; ++r) ring.push_back(grid.at(grid.u_of[x], r));
        std::vector<SlotRef> sync;
        for (const auto& tile : kv_block(x, mod(t_of(x) - k, T))) {
          if (tile.tokens.count > 0) sync.push_back(tile.all());
        }
        gp.barrier(x, ring, sync, false, kRing, str("barrier ring: kv of stage ", k, " landed"));
      }
    }
    passes(
        [&](int x) {
          std::vector<detail::RingWork> work;
          for (int j = 1; j < T; ++j) append(work, q_block(x, mod(t_of(x) - j, T)));
          append(work, gp.joint_work(x));
          return work;
        },
        [&](int x) { return mod(t_of(x) - k, T); }, str("pull kv stage ", k));
  }
  // Push O stages: O_{t-k} is complete; send it home while Q_t meets KV_{t-k}.
  for (int k = 1; k < T; ++k) {
    std::vector<std::vector<int>> targets(P);
    for (int x = 0; x < P; ++x) {
      targets[x] = block(mod(t_of(x) - k, T));
      for (int m : targets[x]) gp.finalize_member(x, m, str("push o stage ", k, ": finalize"));
    }
    gp.exchange_outputs(all, targets, {}, one_sided, str("push o stage ", k));
    passes([&](int x) { return q_block(x, t_of(x)); }, [&](int x) { return mod(t_of(x) - k, T); },
           str("push o stage ", k));
  }
  // O_t: finalize and exchange inside the machine; the joint output goes everywhere.
  std::vector<std::vector<int>> targets(P), groups(P);
  for (int x = 0; x < P; ++x) {
    targets[x] = block(t_of(x));
    groups[x] = block_ranks(x, t_of(x));
    for (int m : targets[x]) gp.finalize_member(x, m, "finalize stationary o");
    gp.finalize_joint(x, "finalize joint");
  }
  if (per > 1) gp.exchange_outputs(all, targets, groups, one_sided, "stationary exchange of o");
  gp.gather_joint_outputs(one_sided);
  if (one_sided && P > 1) {
    for (int x = 0; x < P; ++x) gp.barrier(x, all, {}, true, kOther, "barrier all: outputs landed");
  }
  return b.finish();
}

}  // namespace tessera::sp
