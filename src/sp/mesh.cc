// Mesh-Attention planner (mesh-attention.txt).
//
// The P x P matrix of (Q chunk, KV chunk) blocks is cut into P tiles of a x b blocks
// (a * b = P). GPU g = i * a + j (i < b tile row, j < a position; GPU ids are ranks in
// machine-major order, chunk k is the tokens GPU k owns) computes Q chunks i*a + j' (its Q
// group: the a GPUs of tile row i) against KV chunks i'*a + j (its KV group: the b GPUs
// congruent to j mod a). Both groups contain g: the local Q-KV property.
// Local indices (the paper's Table 1): local Q index x is Q chunk i*a + (j - x mod a); local
// KV index y is KV chunk ((i - y) mod b) * a + j. Q and KV groups are rings:
//   Recv Q #k   send local Q k-1 to the Q successor (j+1), receive local Q k from j-1
//   Recv KV #k  the same in the KV group (successor i+1)
//   Send O #s   send the partial O of local row s to the Q successor, receive the partial of
//               local row s+1 (mod a) from the predecessor and merge it in (a ring
//               reduce-scatter: after a-1 of them each GPU holds its own row, complete)
// The order of these and of the a*b blocks is Algorithm 2, a greedy schedule: before every
// Q/KV receive is computed which one unlocks more blocks per block-time it needs to hide
// (q_blocks, kv_blocks from the cost model), and each step computes just enough ready blocks
// (row-first, own row 0 last) to hide its transfer; then rows 1..a-1 are completed and sent
// (o_blocks of other work hiding each send); then the rest.
// Causal: striped layout by default (section 3.7) and the mask on global positions; blocks
// the mask hides entirely are skipped. GQA: KV chunks carry kv_heads heads.
// Joint tokens: every GPU's own row attends the joint KV; tile row i's Q group takes the
// i-th shard of the joint queries, each member attends it against its b KV chunks, the
// members' partials are merged on member j = 0, finalized there and all-gathered.
// The tile shape, when not given, is the one whose plan the sim executor times fastest.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "plan_builder.h"
#include "planner_common.h"
#include "tessera/core/error.h"
#include "tessera/sp/sim.h"

namespace tessera::sp {

namespace {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

using detail::TileRef;

}  // namespace

std::vector<MeshStep> mesh_greedy_schedule(int a, int b, const MeshCosts& costs) {
  TESSERA_CHECK_ARG(a >= 1 && b >= 1, "mesh tile = ", a, " x ", b, ": expected a, b >= 1");
  TESSERA_CHECK_ARG(costs.q_blocks >= 1 && costs.kv_blocks >= 1 && costs.o_blocks >= 1,
                    "mesh costs = ", costs.q_blocks, "/", costs.kv_blocks, "/", costs.o_blocks,
                    ": expected >= 1 blocks each");
  std::vector<std::vector<bool>> done(a, std::vector<bool>(b, false));
  // Row-first, the own row (local index 0) last: it is not on any other GPU's critical path.
  std::vector<std::pair<int, int>> priority;
  for (int x = 1; x < a; ++x) {
    for (int y = 0; y < b; ++y) priority.push_back({x, y});
  }
  for (int y = 0; y < b; ++y) priority.push_back({0, y});
  int rq = 0;
  int rk = 0;
  auto take = [&](int n, MeshStep& step) {
    for (const auto& [x, y] : priority) {
      if (n == 0) break;
      if (done[x][y] || x > rq || y > rk) continue;
      done[x][y] = true;
      step.blocks.push_back({x, y});
      --n;
    }
  };
  std::vector<MeshStep> steps;
  // Part 1: receive every Q and KV chunk, choosing the more profitable receive each time.
  while (rq < a - 1 || rk < b - 1) {
    const double profit_q = rq < a - 1 ? double(rk + 1) / costs.q_blocks : -1.0;
    const double profit_kv = rk < b - 1 ? double(rq + 1) / costs.kv_blocks : -1.0;
    MeshStep step;
    const bool pick_q =
        profit_q > profit_kv || (profit_q == profit_kv && costs.q_blocks <= costs.kv_blocks);
    step.comm = pick_q ? 'Q' : 'K';
    take(pick_q ? costs.q_blocks : costs.kv_blocks, step);
    (pick_q ? rq : rk) += 1;
    steps.push_back(std::move(step));
  }
  // Part 2: complete rows 1..a-1 in order and send each, hiding the send behind other work.
  for (int s = 1; s < a; ++s) {
    MeshStep finish_row;
    for (int y = 0; y < b; ++y) {
      if (!done[s][y]) {
        done[s][y] = true;
        finish_row.blocks.push_back({s, y});
      }
    }
    if (!finish_row.blocks.empty()) steps.push_back(std::move(finish_row));
    MeshStep send;
    send.comm = 'O';
    take(costs.o_blocks, send);
    steps.push_back(std::move(send));
  }
  // Part 3: whatever is left (the own row).
  MeshStep rest;
  take(a * b, rest);
  if (!rest.blocks.empty()) steps.push_back(std::move(rest));
  return steps;
}

int64_t mesh_formula_bytes_in(const AttentionShape& shape, int world_size, int a, int b) {
  const int64_t chunk = shape.seq_len / world_size;
  const int64_t io = int64_t(dtype_size(shape.dtype));
  const int64_t pd = int64_t(dtype_size(shape.partial_dtype));
  const int64_t q = shape.batch * chunk * shape.heads * shape.head_dim * io;
  const int64_t kv = 2 * shape.batch * chunk * shape.kv_heads * shape.head_dim * io;
  const int64_t o = shape.batch * chunk * shape.heads * (shape.head_dim * pd + 4);  // O + f32 lse
  return (a - 1) * q + (b - 1) * kv + (a - 1) * o;
}

MeshCosts mesh_costs(const PlanRequest& request, int a, int b, const CostModel& model) {
  const AttentionShape shape = request.shape();
  const Topology& topo = request.topology;
  const int P = topo.world_size;
  TESSERA_CHECK_ARG(a >= 1 && b >= 1 && a * b == P, "mesh tile = ", a, " x ", b,
                    ": expected a * b = ", P);
  const std::vector<int> order = detail::machine_major_order(topo);
  // The slowest link each ring uses.
  LinkClass q_link = LinkClass::kSelf;
  LinkClass kv_link = LinkClass::kSelf;
  for (int g = 0; g < P; ++g) {
    const int i = g / a;
    const int j = g % a;
    const int q_next = order[i * a + mod(j + 1, a)];
    const int kv_next = order[mod(i + 1, b) * a + j];
    q_link = std::max(q_link, topo.links[size_t(order[g]) * P + q_next]);
    kv_link = std::max(kv_link, topo.links[size_t(order[g]) * P + kv_next]);
  }
  const int64_t rows = std::max<int64_t>(1, shape.seq_len / P);
  // A typical block: for causal (striped) about half of it is visible.
  const int64_t pairs = shape.causal ? rows * (rows + 1) / 2 : rows * rows;
  const double block_us = model.attention_us(shape, shape.heads, rows, rows, pairs);
  const int64_t io = int64_t(dtype_size(shape.dtype));
  const int64_t pd = int64_t(dtype_size(shape.partial_dtype));
  const int64_t q_bytes = shape.batch * rows * shape.heads * shape.head_dim * io;
  const int64_t kv_bytes = 2 * shape.batch * rows * shape.kv_heads * shape.head_dim * io;
  const int64_t o_bytes = shape.batch * rows * shape.heads * (shape.head_dim * pd + 4);
  auto blocks = [&](LinkClass link, int64_t bytes) {
    const double t = model.transfer_us(link, bytes, CommMode::kTwoSided);  // Mesh moves with NCCL
    // Capped before the cast: a slow link or a huge shape can give ratios past int.
    const double ratio = std::ceil(t / std::max(block_us, 1e-9));
    return ratio >= 1 ? int(std::min(ratio, double(std::numeric_limits<int>::max()))) : 1;
  };
  return {blocks(q_link, q_bytes), blocks(kv_link, kv_bytes), blocks(q_link, o_bytes)};
}

namespace {

Plan build_mesh(const PlanRequest& request, int a, int b, const MeshCosts& costs) {
  const AttentionShape shape = request.shape();
  const TokenLayout layout = detail::resolve_layout(request, Method::kMesh);
  const Topology& topo = request.topology;
  const int P = topo.world_size;
  detail::PlanBuilder bld("mesh", shape, topo, layout, CommMode::kTwoSided, 2);
  constexpr int kComm = 1;
  const std::vector<int> order = detail::machine_major_order(topo);
  std::vector<int> mesh_id(P);
  for (int g = 0; g < P; ++g) mesh_id[order[g]] = g;
  const int H = shape.heads;
  const int Hkv = shape.kv_heads;
  const int64_t J = shape.joint_tokens;

  auto chunk_rows = [&](int g) { return bld.owned_rows(order[g]); };
  auto q_owner = [&](int g, int x) { return (g / a) * a + mod(g % a - x, a); };
  auto kv_owner = [&](int g, int y) { return mod(g / a - y, b) * a + g % a; };
  auto q_next = [&](int g) { return order[(g / a) * a + mod(g % a + 1, a)]; };
  auto kv_next = [&](int g) { return order[mod(g / a + 1, b) * a + g % a]; };

  // Slots and row offsets (per rank): received Q blocks, received KV blocks, state rows per
  // local Q index (+ joint share), two receive buffers for partial O, joint partials.
  struct Layout {
    int mesh_q = -1, mesh_kv = -1, state = -1, o_in[2] = {-1, -1}, joint_in = -1;
    std::vector<int64_t> q_row, kv_row, state_row;
    int64_t joint_row = 0, joint_begin = 0, joint_rows = 0;
  };
  std::vector<Layout> lay(P);
  int64_t max_chunk = 0;
  for (int g = 0; g < P; ++g) max_chunk = std::max(max_chunk, chunk_rows(g));
  for (int g = 0; g < P; ++g) {
    const int x_rank = order[g];
    Layout& L = lay[x_rank];
    int64_t qr = 0, kr = 0, sr = 0;
    for (int x = 0; x < a; ++x) {
      L.q_row.push_back(qr);
      if (x > 0) qr += chunk_rows(q_owner(g, x));
      L.state_row.push_back(sr);
      sr += chunk_rows(q_owner(g, x));
    }
    for (int y = 0; y < b; ++y) {
      L.kv_row.push_back(kr);
      if (y > 0) kr += chunk_rows(kv_owner(g, y));
    }
    L.joint_row = sr;
    L.joint_begin = shard_begin(J, b, g / a);
    L.joint_rows = shard_size(J, b, g / a);
    if (a > 1) L.mesh_q = bld.add_slot(x_rank, "mesh_q", SlotKind::kQ, qr, H);
    if (b > 1) L.mesh_kv = bld.add_slot(x_rank, "mesh_kv", SlotKind::kKV, kr, Hkv);
    L.state = bld.add_slot(x_rank, "state", SlotKind::kPartial, sr + L.joint_rows, H);
    if (a > 1) {
      L.o_in[0] = bld.add_slot(x_rank, "o_in0", SlotKind::kPartial, max_chunk, H);
      L.o_in[1] = bld.add_slot(x_rank, "o_in1", SlotKind::kPartial, max_chunk, H);
      if (g % a == 0 && L.joint_rows > 0) {
        L.joint_in =
            bld.add_slot(x_rank, "joint_in", SlotKind::kPartial, (a - 1) * L.joint_rows, H);
      }
    }
  }
  // Tiles of `slot` from `row` on that hold the tokens of mesh GPU owner_g.
  auto tiles = [&](int slot, int64_t row, int owner_g, int heads) {
    std::vector<TileRef> out;
    for (const TokenRun& run : bld.owned(order[owner_g])) {
      out.push_back({slot, row, run, 0, 0, heads});
      row += run.count;
    }
    return out;
  };
  auto q_tiles = [&](int rank, int x) {
    const int g = mesh_id[rank];
    if (x == 0) return bld.input_q_tiles(rank);
    return tiles(lay[rank].mesh_q, lay[rank].q_row[x], q_owner(g, x), H);
  };
  auto kv_tiles = [&](int rank, int y) {
    const int g = mesh_id[rank];
    if (y == 0) return bld.input_kv_tiles(rank);
    return tiles(lay[rank].mesh_kv, lay[rank].kv_row[y], kv_owner(g, y), Hkv);
  };
  auto state_tiles = [&](int rank, int x) {
    return tiles(lay[rank].state, lay[rank].state_row[x], q_owner(mesh_id[rank], x), H);
  };
  auto buffer_tiles = [&](int rank, int buf, int owner_g) {
    return tiles(lay[rank].o_in[buf], 0, owner_g, H);
  };
  const detail::HeadRange all_heads{0, H};

  // A ring exchange on every rank: rank sends src(rank) tiles to next(rank)'s dst tiles.
  struct Exchange {
    std::map<int, std::vector<Transfer>> by_rank;
  };
  // Returns (receiving rank, row) of every tile sent. A partial state that holds nothing
  // (every block of that row on the sender was masked) is not sent.
  auto ring_exchange = [&](const std::function<int(int)>& next,
                           const std::function<std::vector<TileRef>(int)>& src,
                           const std::function<std::vector<TileRef>(int)>& dst_on_next,
                           const std::string& note) {
    Exchange ex;
    std::set<std::pair<int, int64_t>> sent;
    for (int r = 0; r < P; ++r) {
      const int n = next(r);
      const std::vector<TileRef> s = src(r);
      const std::vector<TileRef> d = dst_on_next(r);
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k].tokens.count == 0) continue;
        if (bld.slot(r, s[k].slot).kind == SlotKind::kPartial && !bld.holds_state(r, s[k].all())) {
          continue;
        }
        sent.insert({n, d[k].row});
        const Transfer t = bld.transfer(r, s[k].all(), n, d[k].all());
        ex.by_rank[r].push_back(t);
        ex.by_rank[n].push_back(t);
      }
    }
    for (int r = 0; r < P; ++r) {
      if (ex.by_rank[r].empty()) continue;
      Step step;
      step.kind = StepKind::kSendRecv;
      step.stream = kComm;
      step.note = note;
      step.transfers = ex.by_rank[r];
      bld.add(r, std::move(step));
    }
    return sent;
  };

  const std::vector<MeshStep> schedule = mesh_greedy_schedule(a, b, costs);
  int rq = 0, rk = 0, so = 0;
  for (size_t si = 0; si < schedule.size(); ++si) {
    const MeshStep& st = schedule[si];
    int merge_row = -1;
    int merge_buf = 0;
    std::set<std::pair<int, int64_t>> received;
    if (st.comm == 'Q') {
      const int k = ++rq;
      ring_exchange([&](int r) { return q_next(mesh_id[r]); },
                    [&](int r) { return q_tiles(r, k - 1); },
                    [&](int r) { return q_tiles(q_next(mesh_id[r]), k); }, str("recv q #", k));
    } else if (st.comm == 'K') {
      const int k = ++rk;
      ring_exchange([&](int r) { return kv_next(mesh_id[r]); },
                    [&](int r) { return kv_tiles(r, k - 1); },
                    [&](int r) { return kv_tiles(kv_next(mesh_id[r]), k); }, str("recv kv #", k));
    } else if (st.comm == 'O') {
      const int s = ++so;
      // Rank g sends its row s (Q chunk q_owner(g, s)); the successor gets it as row s + 1.
      received = ring_exchange(
          [&](int r) { return q_next(mesh_id[r]); }, [&](int r) { return state_tiles(r, s); },
          [&](int r) { return buffer_tiles(q_next(mesh_id[r]), s % 2, q_owner(mesh_id[r], s)); },
          str("send o #", s));
      merge_row = mod(s + 1, a);
      merge_buf = s % 2;
    }
    for (int r = 0; r < P; ++r) {
      for (const auto& [x, y] : st.blocks) {
        const std::vector<TileRef> q = q_tiles(r, x);
        const std::vector<TileRef> kv = kv_tiles(r, y);
        const std::vector<TileRef> state = state_tiles(r, x);
        for (size_t k = 0; k < q.size(); ++k) {
          bld.emit_attention(r, q[k], kv, state[k], all_heads,
                             str("step ", si, ": block q", x, " kv", y));
        }
      }
      if (merge_row >= 0) {
        const int g = mesh_id[r];
        const std::vector<TileRef> in = buffer_tiles(r, merge_buf, q_owner(g, merge_row));
        const std::vector<TileRef> state = state_tiles(r, merge_row);
        for (size_t k = 0; k < in.size(); ++k) {
          if (in[k].tokens.count == 0 || !received.count({r, in[k].row})) continue;
          bld.emit_merge(r, in[k].all(), state[k].all(), str("merge o of row ", merge_row));
        }
      }
    }
  }
  // Own rows: the joint KV, then finalize into the output.
  for (int r = 0; r < P; ++r) {
    const std::vector<TileRef> q = q_tiles(r, 0);
    const std::vector<TileRef> state = state_tiles(r, 0);
    if (J > 0) {
      for (size_t k = 0; k < q.size(); ++k) {
        bld.emit_attention(r, q[k], {bld.joint_kv_tile(r)}, state[k], all_heads,
                           "own rows: joint kv");
      }
    }
    const std::vector<TileRef> out = bld.input_q_tiles(r);
    for (size_t k = 0; k < q.size(); ++k) {
      TileRef o = out[k];
      o.slot = bld.io(r).o;
      bld.emit_finalize(r, state[k].all(), o.all(), "finalize own rows");
    }
  }
  if (J > 0) {
    // Joint queries of tile row i: every member against its b KV chunks, the leader also
    // against the joint KV; partials merged on the leader, finalized, all-gathered.
    for (int r = 0; r < P; ++r) {
      const Layout& L = lay[r];
      if (L.joint_rows == 0) continue;
      const TileRef q{bld.io(r).joint_q, L.joint_begin, {L.joint_begin, 1, L.joint_rows}, 0, 0, H};
      const TileRef st{L.state, L.joint_row, {L.joint_begin, 1, L.joint_rows}, 0, 0, H};
      std::vector<TileRef> kv;
      for (int y = 0; y < b; ++y) {
        for (const TileRef& t : kv_tiles(r, y)) kv.push_back(t);
      }
      if (mesh_id[r] % a == 0) kv.push_back(bld.joint_kv_tile(r));
      bld.emit_attention(r, q, kv, st, all_heads, "joint queries");
    }
    if (a > 1) {
      Exchange ex;
      std::set<std::pair<int, int>> joint_sent;  // (leader, member)
      for (int r = 0; r < P; ++r) {
        const int g = mesh_id[r];
        const Layout& L = lay[r];
        if (g % a == 0 || L.joint_rows == 0) continue;
        const int leader = order[(g / a) * a];
        const SlotRef src{L.state, {L.joint_row, L.joint_rows, 0, H}};
        if (!bld.holds_state(r, src)) continue;  // causal: joint rows see no image KV
        joint_sent.insert({leader, g % a});
        const SlotRef dst{lay[leader].joint_in, {(g % a - 1) * L.joint_rows, L.joint_rows, 0, H}};
        const Transfer t = bld.transfer(r, src, leader, dst);
        ex.by_rank[r].push_back(t);
        ex.by_rank[leader].push_back(t);
      }
      for (int r = 0; r < P; ++r) {
        if (ex.by_rank[r].empty()) continue;
        Step step;
        step.kind = StepKind::kSendRecv;
        step.stream = kComm;
        step.note = "gather joint partials";
        step.transfers = ex.by_rank[r];
        bld.add(r, std::move(step));
      }
      for (int r = 0; r < P; ++r) {
        const Layout& L = lay[r];
        if (mesh_id[r] % a != 0 || L.joint_rows == 0) continue;
        const SlotRef st{L.state, {L.joint_row, L.joint_rows, 0, H}};
        for (int j = 1; j < a; ++j) {
          if (!joint_sent.count({r, j})) continue;
          bld.emit_merge(r, {L.joint_in, {(j - 1) * L.joint_rows, L.joint_rows, 0, H}}, st,
                         str("merge joint partial of member ", j));
        }
      }
    }
    Exchange ex;
    for (int r = 0; r < P; ++r) {
      const Layout& L = lay[r];
      if (mesh_id[r] % a != 0 || L.joint_rows == 0) continue;
      const SlotRef out{bld.io(r).joint_o, {L.joint_begin, L.joint_rows, 0, H}};
      bld.emit_finalize(r, {L.state, {L.joint_row, L.joint_rows, 0, H}}, out, "finalize joint");
      for (int y = 0; y < P; ++y) {
        if (y == r) continue;
        SlotRef dst = out;
        dst.slot = bld.io(y).joint_o;
        const Transfer t = bld.transfer(r, out, y, dst);
        ex.by_rank[r].push_back(t);
        ex.by_rank[y].push_back(t);
      }
    }
    if (P > 1) {
      std::vector<int> all(P);
      for (int r = 0; r < P; ++r) all[r] = r;
      for (int r = 0; r < P; ++r) {
        Step step;
        step.kind = StepKind::kAllToAll;
        step.stream = kComm;
        step.group = all;
        step.note = "all-gather of the joint output";
        step.transfers = ex.by_rank[r];
        bld.add(r, std::move(step));
      }
    }
  }
  bld.param("tile", str(a, "x", b));
  bld.param("q_blocks", std::to_string(costs.q_blocks));
  bld.param("kv_blocks", std::to_string(costs.kv_blocks));
  bld.param("o_blocks", std::to_string(costs.o_blocks));
  bld.note(str("tile ", a, " x ", b, ": per rank ", a - 1, " Q chunks and ", b - 1,
               " KV chunks in, ", a - 1, " partial O chunks out; hiding one transfer takes ",
               costs.q_blocks, " (Q), ", costs.kv_blocks, " (KV), ", costs.o_blocks,
               " (O) blocks"));
  return bld.finish();
}

}  // namespace

Plan plan_mesh(const PlanRequest& request, const CostModel& model) {
  request.shape();  // validates the request
  model.validate();  // the tile search divides by its bandwidths
  const int P = request.topology.world_size;
  TESSERA_CHECK_ARG(request.options.comm == CommMode::kTwoSided,
                    "comm = ", comm_mode_name(request.options.comm),
                    ": mesh is planned two-sided only (its rings pair sends and receives)");
  const int a0 = request.options.mesh_rows;
  const int b0 = request.options.mesh_cols;
  if (a0 != 0 || b0 != 0) {
    TESSERA_CHECK_ARG(a0 >= 1 && b0 >= 1 && int64_t(a0) * b0 == P, "mesh tile = ", a0, " x ", b0,
                      ": expected a * b = ", P, " ranks");
    return build_mesh(request, a0, b0, mesh_costs(request, a0, b0, model));
  }
  // Every factorization, timed on the cost model; the fastest wins.
  Plan best;
  double best_us = 0;
  std::vector<std::string> tried;
  for (int a = 1; a <= P; ++a) {
    if (P % a != 0) continue;
    const int b = P / a;
    Plan plan = build_mesh(request, a, b, mesh_costs(request, a, b, model));
    const double us = simulate(plan, model).total_us;
    tried.push_back(str(a, "x", b, " ", int64_t(std::llround(us)), " us"));
    if (best.ranks.empty() || us < best_us) {
      best = std::move(plan);
      best_us = us;
    }
  }
  std::string line = "tile search (sim):";
  for (const std::string& t : tried) line += " " + t + ";";
  best.notes.push_back(line);
  return best;
}

}  // namespace tessera::sp
