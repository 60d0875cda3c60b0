// GridPlanner: slots, tiles, exchanges and ring passes of the Ulysses/Ring family (see
// sequence_grid.h).
#include "sequence_grid.h"

#include <algorithm>
#include <map>

#include "tessera/core/error.h"

namespace tessera::sp::detail {

namespace {
int mod(int a, int n) {
  return ((a % n) + n) % n;
}
}  // namespace

std::vector<int> Grid::u_group_sorted(int r) const {
  return sorted_ranks(rows[r]);
}

std::string Grid::to_string() const {
  std::string s = "[";
  for (const auto& row : rows) {
    s += "[";
    for (size_t i = 0; i < row.size(); ++i) s += str(i ? " " : "", row[i]);
    s += "]";
  }
  return s + "]";
}

std::vector<int> sorted_ranks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

Grid make_grid(const std::vector<std::vector<int>>& u_groups, int world_size) {
  Grid g;
  TESSERA_CHECK(!u_groups.empty(), ErrorCode::kInternal, "grid without groups");
  g.pu = int(u_groups[0].size());
  g.pr = int(u_groups.size());
  g.rows = u_groups;
  g.u_of.assign(world_size, -1);
  g.r_of.assign(world_size, -1);
  TESSERA_CHECK(g.pu * g.pr == world_size, ErrorCode::kInternal, "grid of ", g.pr, " groups of ",
                g.pu, " for ", world_size, " ranks");
  for (int r = 0; r < g.pr; ++r) {
    TESSERA_CHECK(int(u_groups[r].size()) == g.pu, ErrorCode::kInternal, "uneven Ulysses groups");
    for (int u = 0; u < g.pu; ++u) {
      const int rank = u_groups[r][u];
      TESSERA_CHECK(rank >= 0 && rank < world_size && g.u_of[rank] < 0, ErrorCode::kInternal,
                    "rank ", rank, " appears twice or is out of range in the grid");
      g.u_of[rank] = u;
      g.r_of[rank] = r;
    }
  }
  return g;
}

GridPlanner::GridPlanner(PlanBuilder& builder, const Grid& grid, int comm_stream, int ring_stream)
    : b_(builder), grid_(grid), comm_stream_(comm_stream), ring_stream_(ring_stream) {
  const AttentionShape& s = b_.shape();
  const int P = b_.world();
  for (int u = 0; u < grid_.pu; ++u) {
    hq_.push_back(query_head_group(s.heads, grid_.pu, u));
    hk_.push_back(kv_heads_for(hq_.back(), s.group_size()));
  }
  member_row_.resize(P);
  super_rows_.assign(P, 0);
  int64_t max_super = 0;
  for (int x = 0; x < P; ++x) {
    const int r = grid_.r_of[x];
    int64_t row = 0;
    for (int m = 0; m < grid_.pu; ++m) {
      member_row_[x].push_back(row);
      row += b_.owned_rows(grid_.at(m, r));
    }
    super_rows_[x] = row;
    max_super = std::max(max_super, row);
  }
  ua_q_.assign(P, -1);
  ua_kv_.assign(P, -1);
  ua_o_.assign(P, -1);
  state_.assign(P, -1);
  ring_[0].assign(P, -1);
  ring_[1].assign(P, -1);
  for (int x = 0; x < P; ++x) {
    const int nq = hq(x).count();
    const int nk = hk(x).count();
    if (grid_.pu > 1) {
      ua_q_[x] = b_.add_slot(x, "ua_q", SlotKind::kQ, super_rows_[x], nq);
      ua_kv_[x] = b_.add_slot(x, "ua_kv", SlotKind::kKV, super_rows_[x], nk);
      ua_o_[x] = b_.add_slot(x, "ua_o", SlotKind::kO, super_rows_[x], nq);
    }
    const int64_t joint_rows = shard_size(s.joint_tokens, grid_.pr, grid_.r_of[x]);
    state_[x] = b_.add_slot(x, "state", SlotKind::kPartial, super_rows_[x] + joint_rows, nq);
    if (grid_.pr > 1) {
      ring_[0][x] = b_.add_slot(x, "ring0", SlotKind::kKV, max_super, nk);
      ring_[1][x] = b_.add_slot(x, "ring1", SlotKind::kKV, max_super, nk);
    }
  }
}

std::vector<TileRef> GridPlanner::q_tiles(int x, int member) const {
  const int y = member_rank(x, member);
  const HeadRange h = hq(x);
  if (y == x) {
    std::vector<TileRef> tiles = b_.input_q_tiles(x);
    for (TileRef& t : tiles) t = t.with_heads(h.begin, h.count());
    return tiles;
  }
  std::vector<TileRef> tiles;
  int64_t row = member_row_[x][member];
  for (const TokenRun& run : b_.owned(y)) {
    tiles.push_back({ua_q_[x], row, run, 0, h.begin, h.count()});
    row += run.count;
  }
  return tiles;
}

std::vector<TileRef> GridPlanner::kv_tiles(int x, int member) const {
  const int y = member_rank(x, member);
  const HeadRange h = hk(x);
  if (y == x) {
    std::vector<TileRef> tiles = b_.input_kv_tiles(x);
    for (TileRef& t : tiles) t = t.with_heads(h.begin, h.count());
    return tiles;
  }
  std::vector<TileRef> tiles;
  int64_t row = member_row_[x][member];
  for (const TokenRun& run : b_.owned(y)) {
    tiles.push_back({ua_kv_[x], row, run, 0, h.begin, h.count()});
    row += run.count;
  }
  return tiles;
}

std::vector<TileRef> GridPlanner::state_tiles(int x, int member) const {
  const int y = member_rank(x, member);
  const HeadRange h = hq(x);
  std::vector<TileRef> tiles;
  int64_t row = member_row_[x][member];
  for (const TokenRun& run : b_.owned(y)) {
    tiles.push_back({state_[x], row, run, 0, h.begin, h.count()});
    row += run.count;
  }
  return tiles;
}

std::vector<TileRef> GridPlanner::out_tiles(int x, int member) const {
  const int y = member_rank(x, member);
  const HeadRange h = hq(x);
  std::vector<TileRef> tiles;
  if (y == x) {
    int64_t row = 0;
    for (const TokenRun& run : b_.owned(x)) {
      tiles.push_back({b_.io(x).o, row, run, h.begin, h.begin, h.count()});
      row += run.count;
    }
    return tiles;
  }
  int64_t row = member_row_[x][member];
  for (const TokenRun& run : b_.owned(y)) {
    tiles.push_back({ua_o_[x], row, run, 0, h.begin, h.count()});
    row += run.count;
  }
  return tiles;
}

std::vector<TileRef> GridPlanner::owner_out_tiles(int x, int member) const {
  const int y = member_rank(x, member);
  const HeadRange h = hq(x);
  std::vector<TileRef> tiles;
  int64_t row = 0;
  for (const TokenRun& run : b_.owned(y)) {
    tiles.push_back({b_.io(y).o, row, run, h.begin, h.begin, h.count()});
    row += run.count;
  }
  return tiles;
}

TileRef GridPlanner::joint_q_share(int x) const {
  const int64_t J = b_.shape().joint_tokens;
  const int r = grid_.r_of[x];
  const int64_t begin = shard_begin(J, grid_.pr, r);
  const HeadRange h = hq(x);
  return {b_.io(x).joint_q, begin,   {begin, 1, shard_size(J, grid_.pr, r)},
          h.begin,          h.begin, h.count()};
}

TileRef GridPlanner::joint_state(int x) const {
  const int64_t J = b_.shape().joint_tokens;
  const int r = grid_.r_of[x];
  const int64_t begin = shard_begin(J, grid_.pr, r);
  const HeadRange h = hq(x);
  return {state_[x], super_rows_[x], {begin, 1, shard_size(J, grid_.pr, r)}, 0, h.begin, h.count()};
}

TileRef GridPlanner::joint_out_share(int x) const {
  const int64_t J = b_.shape().joint_tokens;
  const int r = grid_.r_of[x];
  const int64_t begin = shard_begin(J, grid_.pr, r);
  const HeadRange h = hq(x);
  return {b_.io(x).joint_o, begin,   {begin, 1, shard_size(J, grid_.pr, r)},
          h.begin,          h.begin, h.count()};
}

std::vector<SlotRef> GridPlanner::ua_input_regions(int x) const {
  std::vector<SlotRef> refs;
  if (ua_q_[x] >= 0) {
    refs.push_back({ua_q_[x], {0, super_rows_[x], 0, hq(x).count()}});
    refs.push_back({ua_kv_[x], {0, super_rows_[x], 0, hk(x).count()}});
  }
  return refs;
}

namespace {
// Transfers grouped by the ranks that list them.
struct Exchange {
  std::map<int, std::vector<Transfer>> by_rank;
  void add(const Transfer& t) {
    by_rank[t.src_rank].push_back(t);
    by_rank[t.dst_rank].push_back(t);
  }
};

const std::vector<Transfer>& by_rank_of(const Exchange& ex, int rank) {
  static const std::vector<Transfer> kNone;
  auto it = ex.by_rank.find(rank);
  return it == ex.by_rank.end() ? kNone : it->second;
}

// One step per rank of `ranks` for an exchange: puts of the transfers it sources (one-sided),
// else its sends and receives (no groups), else an all-to-all over groups[i].
void add_exchange_steps(PlanBuilder& builder, int comm_stream, const Exchange& ex,
                        const std::vector<int>& ranks, const std::vector<std::vector<int>>& groups,
                        bool one_sided, const std::string& note) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int x = ranks[i];
    Step step;
    step.stream = comm_stream;
    step.note = note;
    if (one_sided) {
      step.kind = StepKind::kPut;
      for (const Transfer& t : by_rank_of(ex, x)) {
        if (t.src_rank == x) step.transfers.push_back(t);
      }
      if (step.transfers.empty()) continue;
    } else if (groups.empty()) {
      step.kind = StepKind::kSendRecv;
      step.transfers = by_rank_of(ex, x);
      if (step.transfers.empty()) continue;
    } else {
      step.kind = StepKind::kAllToAll;
      step.group = groups[i];
      step.transfers = by_rank_of(ex, x);
    }
    builder.add(x, std::move(step));
  }
}
}  // namespace

void GridPlanner::exchange_inputs(const std::vector<int>& ranks,
                                  const std::vector<std::vector<int>>& targets,
                                  const std::vector<std::vector<int>>& groups, bool one_sided,
                                  const std::string& note, bool send_q, bool send_kv) {
  Exchange ex;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int x = ranks[i];
    const std::vector<TileRef> own_q = b_.input_q_tiles(x);
    const std::vector<TileRef> own_kv = b_.input_kv_tiles(x);
    for (int m : targets[i]) {
      const int y = member_rank(x, m);
      if (y == x) continue;
      const HeadRange yq = hq(y);
      const HeadRange yk = hk(y);
      const std::vector<TileRef> dq = q_tiles(y, grid_.u_of[x]);
      const std::vector<TileRef> dkv = kv_tiles(y, grid_.u_of[x]);
      for (size_t k = 0; k < own_q.size(); ++k) {
        if (own_q[k].tokens.count == 0) continue;
        if (send_q && yq.count() > 0) {
          ex.add(b_.transfer(x, own_q[k].heads(yq.begin, yq.count()), y, dq[k].all()));
        }
        if (send_kv && yk.count() > 0) {
          ex.add(b_.transfer(x, own_kv[k].heads(yk.begin, yk.count()), y, dkv[k].all()));
        }
      }
    }
  }
  add_exchange_steps(b_, comm_stream_, ex, ranks, groups, one_sided, note);
}

void GridPlanner::exchange_outputs(const std::vector<int>& ranks,
                                   const std::vector<std::vector<int>>& targets,
                                   const std::vector<std::vector<int>>& groups, bool one_sided,
                                   const std::string& note) {
  Exchange ex;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int x = ranks[i];
    for (int m : targets[i]) {
      const int y = member_rank(x, m);
      if (y == x) continue;
      const std::vector<TileRef> src = out_tiles(x, m);
      const std::vector<TileRef> dst = owner_out_tiles(x, m);
      for (size_t k = 0; k < src.size(); ++k) {
        if (src[k].tokens.count == 0 || src[k].head_count == 0) continue;
        ex.add(b_.transfer(x, src[k].all(), y, dst[k].all()));
      }
    }
  }
  add_exchange_steps(b_, comm_stream_, ex, ranks, groups, one_sided, note);
}

int GridPlanner::pull_inputs(int x, const std::vector<int>& members, bool pull_q, bool pull_kv,
                             const std::string& note) {
  Step step;
  step.kind = StepKind::kGet;
  step.stream = comm_stream_;
  step.note = note;
  const HeadRange q = hq(x);
  const HeadRange k = hk(x);
  for (int m : members) {
    const int y = member_rank(x, m);
    if (y == x) continue;
    const std::vector<TileRef> src_q = b_.input_q_tiles(y);
    const std::vector<TileRef> src_kv = b_.input_kv_tiles(y);
    const std::vector<TileRef> dst_q = q_tiles(x, m);
    const std::vector<TileRef> dst_kv = kv_tiles(x, m);
    for (size_t i = 0; i < src_q.size(); ++i) {
      if (src_q[i].tokens.count == 0) continue;
      if (pull_q && q.count() > 0) {
        step.transfers.push_back(
            b_.transfer(y, src_q[i].heads(q.begin, q.count()), x, dst_q[i].all()));
      }
      if (pull_kv && k.count() > 0) {
        step.transfers.push_back(
            b_.transfer(y, src_kv[i].heads(k.begin, k.count()), x, dst_kv[i].all()));
      }
    }
  }
  if (step.transfers.empty()) return -1;
  return b_.add(x, std::move(step));
}

void GridPlanner::ring_pass(int u, const std::vector<std::vector<TileRef>>& chunks,
                            const std::vector<std::vector<RingWork>>& work, bool one_sided,
                            const std::string& note) {
  const int pr = grid_.pr;
  const HeadRange h = hk_[u];
  auto rank_of = [&](int r) { return grid_.at(u, r); };
  // Chunk c laid out in ring buffer `buf` of rank x.
  auto buffered = [&](int x, int buf, int c) {
    std::vector<TileRef> tiles;
    int64_t row = 0;
    for (const TileRef& t : chunks[c]) {
      tiles.push_back({ring_[buf][x], row, t.tokens, 0, h.begin, h.count()});
      row += t.tokens.count;
    }
    return tiles;
  };
  auto compute = [&](int r, int c, const std::vector<TileRef>& tiles, int s) {
    const int x = rank_of(r);
    for (const RingWork& w : work[r]) {
      b_.emit_attention(x, w.q, tiles, w.state, hq_[u],
                        str(note, " step ", s, ": kv of ring member ", c));
    }
  };
  for (int s = 0; s < pr; ++s) {
    if (s < pr - 1 && h.count() > 0) {
      if (!one_sided) {
        // Member r forwards the chunk it holds (member r - s's) to r + 1.
        Exchange ex;
        for (int r = 0; r < pr; ++r) {
          const int x = rank_of(r);
          const int next = rank_of(mod(r + 1, pr));
          const int c = mod(r - s, pr);
          const std::vector<TileRef> src = s == 0 ? chunks[r] : buffered(x, (s - 1) % 2, c);
          const std::vector<TileRef> dst = buffered(next, s % 2, c);
          for (size_t k = 0; k < src.size(); ++k) {
            if (src[k].tokens.count == 0) continue;
            ex.add(b_.transfer(x, src[k].heads(h.begin, h.count()), next, dst[k].all()));
          }
        }
        for (int r = 0; r < pr; ++r) {
          const int x = rank_of(r);
          if (ex.by_rank[x].empty()) continue;
          Step step;
          step.kind = StepKind::kSendRecv;
          step.stream = ring_stream_;
          step.note = str(note, " step ", s, ": pass kv on");
          step.transfers = ex.by_rank[x];
          b_.add(x, std::move(step));
        }
      } else {
        // Member r pulls the chunk of member r + s + 1 from its owner.
        for (int r = 0; r < pr; ++r) {
          const int x = rank_of(r);
          const int c = mod(r + s + 1, pr);
          const int owner = rank_of(c);
          const std::vector<TileRef> dst = buffered(x, s % 2, c);
          Step step;
          step.kind = StepKind::kGet;
          step.stream = ring_stream_;
          step.note = str(note, " step ", s, ": pull kv of ring member ", c);
          for (size_t k = 0; k < dst.size(); ++k) {
            if (dst[k].tokens.count == 0) continue;
            step.transfers.push_back(
                b_.transfer(owner, chunks[c][k].heads(h.begin, h.count()), x, dst[k].all()));
          }
          if (!step.transfers.empty()) b_.add(x, std::move(step));
        }
      }
    }
    for (int r = 0; r < pr; ++r) {
      const int x = rank_of(r);
      const int c = one_sided ? mod(r + s, pr) : mod(r - s, pr);
      compute(r, c, s == 0 ? chunks[r] : buffered(x, (s - 1) % 2, c), s);
    }
  }
}

void GridPlanner::attend_joint_kv(int x, const std::vector<RingWork>& work,
                                  const std::string& note) {
  if (b_.shape().joint_tokens == 0) return;
  const HeadRange k = hk(x);
  if (k.count() == 0) return;
  const TileRef joint = b_.joint_kv_tile(x).with_heads(k.begin, k.count());
  for (const RingWork& w : work) b_.emit_attention(x, w.q, {joint}, w.state, hq(x), note);
}

void GridPlanner::finalize_member(int x, int member, const std::string& note) {
  const std::vector<TileRef> src = state_tiles(x, member);
  const std::vector<TileRef> dst = out_tiles(x, member);
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k].tokens.count == 0 || src[k].head_count == 0) continue;
    b_.emit_finalize(x, src[k].all(), dst[k].all(), note);
  }
}

void GridPlanner::finalize_joint(int x, const std::string& note) {
  const TileRef s = joint_state(x);
  if (s.tokens.count == 0 || s.head_count == 0) return;
  b_.emit_finalize(x, s.all(), joint_out_share(x).all(), note);
}

void GridPlanner::gather_joint_outputs(bool one_sided) {
  const int P = b_.world();
  if (b_.shape().joint_tokens == 0 || P == 1) return;
  Exchange ex;
  for (int x = 0; x < P; ++x) {
    const TileRef share = joint_out_share(x);
    if (share.tokens.count == 0 || share.head_count == 0) continue;
    for (int y = 0; y < P; ++y) {
      if (y == x) continue;
      SlotRef dst = share.all();
      dst.slot = b_.io(y).joint_o;
      ex.add(b_.transfer(x, share.all(), y, dst));
    }
  }
  std::vector<int> all(P);
  for (int x = 0; x < P; ++x) all[x] = x;
  for (int x = 0; x < P; ++x) {
    Step step;
    step.stream = comm_stream_;
    step.note = "all-gather of the joint output";
    if (one_sided) {
      step.kind = StepKind::kPut;
      for (const Transfer& t : ex.by_rank[x]) {
        if (t.src_rank == x) step.transfers.push_back(t);
      }
      if (step.transfers.empty()) continue;
    } else {
      step.kind = StepKind::kAllToAll;
      step.group = all;
      step.transfers = ex.by_rank[x];
    }
    b_.add(x, std::move(step));
  }
}

void GridPlanner::barrier(int x, const std::vector<int>& group, const std::vector<SlotRef>& sync,
                          bool after_all, int stream, const std::string& note) {
  Step step;
  step.kind = StepKind::kBarrier;
  step.stream = stream;
  step.group = sorted_ranks(group);
  step.note = note;
  if (after_all) {
    const std::vector<Step>& steps = b_.rank_steps(x);
    std::vector<int> last(size_t(b_.num_streams()), -1);
    for (int i = 0; i < int(steps.size()); ++i) last[steps[i].stream] = i;
    for (int s = 0; s < int(last.size()); ++s) {
      if (s != stream && last[s] >= 0) step.deps.push_back(last[s]);
    }
  }
  b_.add(x, std::move(step), sync);
}

std::vector<RingWork> GridPlanner::super_work(int x) const {
  std::vector<RingWork> work;
  for (int m = 0; m < grid_.pu; ++m) {
    const std::vector<TileRef> q = q_tiles(x, m);
    const std::vector<TileRef> st = state_tiles(x, m);
    for (size_t k = 0; k < q.size(); ++k) work.push_back({q[k], st[k]});
  }
  return work;
}

std::vector<TileRef> GridPlanner::super_kv(int x) const {
  std::vector<TileRef> tiles;
  for (int m = 0; m < grid_.pu; ++m) {
    for (const TileRef& t : kv_tiles(x, m)) tiles.push_back(t);
  }
  return tiles;
}

}  // namespace tessera::sp::detail

namespace tessera::sp::detail {

std::vector<RingWork> GridPlanner::joint_work(int x) const {
  const TileRef q = joint_q_share(x);
  if (q.tokens.count == 0 || q.head_count == 0) return {};
  return {{q, joint_state(x)}};
}

void plan_ulysses_ring(PlanBuilder& b, const Grid& grid, bool one_sided) {
  const int P = b.world();
  const int kStream = 1;
  GridPlanner gp(b, grid, kStream, kStream);
  std::vector<int> all(P);
  for (int x = 0; x < P; ++x) all[x] = x;
  std::vector<std::vector<int>> members(P), groups(P);
  for (int x = 0; x < P; ++x) {
    for (int m = 0; m < grid.pu; ++m) members[x].push_back(m);
    groups[x] = grid.u_group_sorted(grid.r_of[x]);
  }
  // 1. Ulysses: tokens of the whole U group for this rank's head group.
  if (grid.pu > 1) {
    gp.exchange_inputs(all, members, groups, one_sided, "ulysses exchange of q, k, v");
  }
  if (one_sided && P > 1) {
    // Pushed inputs have landed everywhere, and every rank's inputs are ready to be pulled.
    for (int x = 0; x < P; ++x) {
      gp.barrier(x, all, gp.ua_input_regions(x), false, kStream, "barrier: inputs in place");
    }
  }
  // 2. Every query row of this rank against the joint KV (local, replicated).
  for (int x = 0; x < P; ++x) {
    std::vector<RingWork> work = gp.super_work(x);
    for (const RingWork& w : gp.joint_work(x)) work.push_back(w);
    gp.attend_joint_kv(x, work, "joint kv");
  }
  // 3. One ring pass per head group over the super-chunks' KV.
  for (int u = 0; u < grid.pu; ++u) {
    std::vector<std::vector<TileRef>> chunks(grid.pr);
    std::vector<std::vector<RingWork>> work(grid.pr);
    for (int r = 0; r < grid.pr; ++r) {
      const int x = grid.at(u, r);
      chunks[r] = gp.super_kv(x);
      work[r] = gp.super_work(x);
      for (const RingWork& w : gp.joint_work(x)) work[r].push_back(w);
    }
    gp.ring_pass(u, chunks, work, one_sided, "ring");
  }
  // 4. Finalize, 5. send O back to the token owners, 6. all-gather the joint output.
  for (int x = 0; x < P; ++x) {
    for (int m = 0; m < grid.pu; ++m) gp.finalize_member(x, m, "finalize");
    gp.finalize_joint(x, "finalize joint");
  }
  if (grid.pu > 1) {
    gp.exchange_outputs(all, members, groups, one_sided, "ulysses exchange of o");
  }
  gp.gather_joint_outputs(one_sided);
  if (one_sided && P > 1) {
    for (int x = 0; x < P; ++x) {
      gp.barrier(x, all, {}, true, kStream, "barrier: outputs landed");
    }
  }
}

Grid streamfusion_grid(const Topology& topology, int pu) {
  const int P = topology.world_size;
  // Order ranks machine-fastest (local rank 0 of every machine, then local rank 1, ...), so
  // consecutive blocks of Pu ranks spread over as many machines as possible.
  std::vector<int> order(P);
  for (int x = 0; x < P; ++x) order[x] = x;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::make_pair(topology.local_rank[a], topology.machine_of_rank[a]) <
           std::make_pair(topology.local_rank[b], topology.machine_of_rank[b]);
  });
  std::vector<std::vector<int>> groups;
  for (int k = 0; k < P / pu; ++k) {
    std::vector<int> g(order.begin() + k * pu, order.begin() + (k + 1) * pu);
    std::sort(g.begin(), g.end(), [&](int a, int b) {
      return std::make_pair(topology.machine_of_rank[a], topology.local_rank[a]) <
             std::make_pair(topology.machine_of_rank[b], topology.local_rank[b]);
    });
    groups.push_back(g);
  }
  // Rings run along the columns: order the groups so each column stays on one machine as
  // long as it can (machine of the first member, then its local rank).
  std::stable_sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    return std::make_pair(topology.machine_of_rank[a[0]], topology.local_rank[a[0]]) <
           std::make_pair(topology.machine_of_rank[b[0]], topology.local_rank[b[0]]);
  });
  return make_grid(groups, P);
}

}  // namespace tessera::sp::detail
