// PlanBuilder (see plan_builder.h).
#include "plan_builder.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::sp::detail {

SlotRef TileRef::heads(int h0, int n) const {
  TESSERA_CHECK(h0 >= first_head && h0 + n <= first_head + head_count, ErrorCode::kInternal,
                "tile of heads [", first_head, ",", first_head + head_count, ") has no heads [", h0,
                ",", h0 + n, ")");
  return {slot, {row, tokens.count, slot_head + (h0 - first_head), n}};
}

TileRef TileRef::with_heads(int h0, int n) const {
  TileRef t = *this;
  t.slot_head = heads(h0, n).region.head_begin;
  t.first_head = h0;
  t.head_count = n;
  return t;
}

HeadRange query_head_group(int heads, int groups, int index) {
  const int begin = int(shard_begin(heads, groups, index));
  return {begin, begin + int(shard_size(heads, groups, index))};
}

HeadRange kv_heads_for(HeadRange q, int g) {
  if (q.count() <= 0) return {0, 0};
  return {q.begin / g, (q.end - 1) / g + 1};
}

bool fully_masked(const TokenRun& q, const TokenRun& kv, bool causal) {
  if (q.count == 0 || kv.count == 0) return true;
  return causal && kv.start > q.last();
}

PlanBuilder::PlanBuilder(std::string method, const AttentionShape& shape, const Topology& topology,
                         TokenLayout layout, CommMode comm, int num_streams) {
  const int P = topology.world_size;
  plan_.method = std::move(method);
  plan_.comm = comm;
  plan_.layout = layout;
  plan_.shape = shape;
  plan_.world_size = P;
  plan_.num_streams = num_streams;
  plan_.machine_of_rank = topology.machine_of_rank;
  plan_.links = topology.links;
  plan_.ranks.resize(P);
  io_.resize(P);
  owned_.resize(P);
  tracked_.resize(P);
  states_.resize(P);
  for (int r = 0; r < P; ++r) {
    owned_[r] = owned_image_tokens(layout, shape.seq_len, shape.joint_tokens, P, r);
    const int64_t own = run_rows(owned_[r]);
    IoSlots& io = io_[r];
    auto bound = [&](const char* name, SlotKind kind, SlotBinding binding, int64_t rows,
                     int heads) {
      plan_.ranks[r].slots.push_back({name, kind, binding, rows, heads});
      return int(plan_.ranks[r].slots.size()) - 1;
    };
    io.q = bound("q", SlotKind::kQ, SlotBinding::kInputQ, own, shape.heads);
    io.kv = bound("kv", SlotKind::kKV, SlotBinding::kInputKV, own, shape.kv_heads);
    io.o = bound("o", SlotKind::kO, SlotBinding::kOutput, own, shape.heads);
    if (shape.joint_tokens > 0) {
      const int64_t J = shape.joint_tokens;
      io.joint_q = bound("joint_q", SlotKind::kQ, SlotBinding::kJointQ, J, shape.heads);
      io.joint_kv = bound("joint_kv", SlotKind::kKV, SlotBinding::kJointKV, J, shape.kv_heads);
      io.joint_o = bound("joint_o", SlotKind::kO, SlotBinding::kJointOutput, J, shape.heads);
    }
  }
}

std::vector<TileRef> PlanBuilder::input_q_tiles(int rank) const {
  std::vector<TileRef> tiles;
  int64_t row = 0;
  for (const TokenRun& run : owned_[rank]) {
    tiles.push_back({io_[rank].q, row, run, 0, 0, plan_.shape.heads});
    row += run.count;
  }
  return tiles;
}

std::vector<TileRef> PlanBuilder::input_kv_tiles(int rank) const {
  std::vector<TileRef> tiles;
  int64_t row = 0;
  for (const TokenRun& run : owned_[rank]) {
    tiles.push_back({io_[rank].kv, row, run, 0, 0, plan_.shape.kv_heads});
    row += run.count;
  }
  return tiles;
}

TileRef PlanBuilder::joint_q_tile(int rank) const {
  return {io_[rank].joint_q, 0, {0, 1, plan_.shape.joint_tokens}, 0, 0, plan_.shape.heads};
}

TileRef PlanBuilder::joint_kv_tile(int rank) const {
  return {io_[rank].joint_kv, 0, {0, 1, plan_.shape.joint_tokens}, 0, 0, plan_.shape.kv_heads};
}

int PlanBuilder::add_slot(int rank, const std::string& name, SlotKind kind, int64_t rows,
                          int heads) {
  plan_.ranks[rank].slots.push_back({name, kind, SlotBinding::kWorkspace, rows, heads});
  return int(plan_.ranks[rank].slots.size()) - 1;
}

namespace {
bool contains(const Region& outer, const Region& inner) {
  return inner.row_begin >= outer.row_begin &&
         inner.row_begin + inner.row_count <= outer.row_begin + outer.row_count &&
         inner.head_begin >= outer.head_begin &&
         inner.head_begin + inner.head_count <= outer.head_begin + outer.head_count;
}
}  // namespace

Transfer PlanBuilder::transfer(int src_rank, const SlotRef& src, int dst_rank, const SlotRef& dst) {
  Transfer t;
  t.id = next_transfer_id_++;
  t.src_rank = src_rank;
  t.src = src;
  t.dst_rank = dst_rank;
  t.dst = dst;
  t.link = link(src_rank, dst_rank);
  t.bytes = region_bytes(plan_.shape, slot(src_rank, src.slot).kind, src.region);
  return t;
}

namespace {

// The peer on the far side of `t` for a step of `rank`.
int peer_of(const Transfer& t, int rank) {
  return t.src_rank == rank ? t.dst_rank : t.src_rank;
}

// A one-sided step's transfers run one after another (the executor issues them in plan order
// on one stream). Ranks that talk to the same peers at the same time must not visit them in
// the same order, or they queue on one peer's NIC while the others idle. Peers on other
// machines come first (the slow link, the one to keep busy), then peers on this machine; in
// each group, peers are visited in rank order rotated by the rank: the classic all-to-all
// schedule (in a group of G, rank i meets i+1, i+2, ..., so every phase is a permutation).
// Transfers with one peer keep their order.
void rotate_peer_order(int rank, const std::vector<int>& machine_of_rank,
                       std::vector<Transfer>& transfers) {
  std::vector<int> peers[2];  // [0]: other machines, [1]: this machine
  auto group_of = [&](int peer) { return machine_of_rank[peer] == machine_of_rank[rank] ? 1 : 0; };
  for (const Transfer& t : transfers) {
    const int p = peer_of(t, rank);
    peers[group_of(p)].push_back(p);
  }
  for (std::vector<int>& g : peers) {
    std::sort(g.begin(), g.end());
    g.erase(std::unique(g.begin(), g.end()), g.end());
  }
  auto turn = [&](const Transfer& t) {
    const int p = peer_of(t, rank);
    const std::vector<int>& g = peers[group_of(p)];
    const int n = int(g.size());
    const int index = int(std::lower_bound(g.begin(), g.end(), p) - g.begin());
    return std::make_pair(group_of(p), (index - rank % n + n) % n);
  };
  std::stable_sort(transfers.begin(), transfers.end(),
                   [&](const Transfer& a, const Transfer& b) { return turn(a) < turn(b); });
}

}  // namespace

int PlanBuilder::add(int rank, Step step, const std::vector<SlotRef>& sync_regions) {
  if (is_one_sided_step(step.kind)) {
    rotate_peer_order(rank, plan_.machine_of_rank, step.transfers);
  }
  struct Use {
    SlotRef ref;
    bool write;
  };
  std::vector<Use> uses;
  switch (step.kind) {
    case StepKind::kSendRecv:
    case StepKind::kAllToAll:
      for (const Transfer& t : step.transfers) {
        if (t.src_rank == rank) uses.push_back({t.src, false});
        if (t.dst_rank == rank) uses.push_back({t.dst, true});
      }
      break;
    case StepKind::kPut:
      for (const Transfer& t : step.transfers) uses.push_back({t.src, false});
      break;
    case StepKind::kGet:
      for (const Transfer& t : step.transfers) uses.push_back({t.dst, true});
      break;
    case StepKind::kCompute:
      uses.push_back({step.compute.q.ref, false});
      for (const AttnOperand& kv : step.compute.kv) uses.push_back({kv.ref, false});
      uses.push_back({step.compute.state, true});
      break;
    case StepKind::kMerge:
    case StepKind::kFinalize:
      uses.push_back({step.src, false});
      uses.push_back({step.dst, true});
      break;
    default:
      break;
  }
  for (const SlotRef& ref : sync_regions) uses.push_back({ref, true});

  const int index = int(plan_.ranks[rank].steps.size());
  auto& tracked = tracked_[rank];
  tracked.resize(plan_.ranks[rank].slots.size());
  std::vector<int> latest(size_t(plan_.num_streams), -1);
  auto scan = [&](const std::vector<Tracked>& list, const Region& region) {
    for (const Tracked& t : list) {
      if (t.stream == step.stream || !t.region.overlaps(region)) continue;
      latest[t.stream] = std::max(latest[t.stream], t.step);
    }
  };
  for (const Use& u : uses) {
    scan(tracked[u.ref.slot].writes, u.ref.region);
    if (u.write) scan(tracked[u.ref.slot].reads, u.ref.region);
  }
  for (int d : latest) {
    if (d >= 0) step.deps.push_back(d);
  }
  // A pull reads peers' buffers, which are only known to be ready after a barrier: it waits
  // for this rank's latest barrier, whatever stream that ran on.
  if (step.kind == StepKind::kGet) {
    const std::vector<Step>& steps = plan_.ranks[rank].steps;
    for (int i = index - 1; i >= 0; --i) {
      if (steps[i].kind == StepKind::kBarrier) {
        if (steps[i].stream != step.stream) step.deps.push_back(i);
        break;
      }
    }
  }
  std::sort(step.deps.begin(), step.deps.end());
  step.deps.erase(std::unique(step.deps.begin(), step.deps.end()), step.deps.end());
  for (const Use& u : uses) {
    if (u.ref.region.empty()) continue;
    SlotTrack& track = tracked[u.ref.slot];
    // Earlier accesses inside a region this step writes are now ordered before it (directly
    // or through the deps just added): later steps only need to depend on this one.
    if (u.write) {
      auto inside = [&](const Tracked& t) {
        return t.step != index && contains(u.ref.region, t.region);
      };
      std::erase_if(track.reads, inside);
      std::erase_if(track.writes, inside);
    }
    (u.write ? track.writes : track.reads).push_back({u.ref.region, index, step.stream});
  }
  plan_.ranks[rank].steps.push_back(std::move(step));
  return index;
}

int PlanBuilder::state_status(int rank, const SlotRef& ref) const {
  int64_t covered = 0;
  for (const StateRegion& s : states_[rank]) {
    if (s.slot != ref.slot || !s.region.overlaps(ref.region)) continue;
    const Region& a = s.region;
    const Region& b = ref.region;
    const int64_t rows = std::min(a.row_begin + a.row_count, b.row_begin + b.row_count) -
                         std::max(a.row_begin, b.row_begin);
    const int64_t heads = std::min(a.head_begin + a.head_count, b.head_begin + b.head_count) -
                          std::max(a.head_begin, b.head_begin);
    covered += rows * heads;
  }
  const int64_t cells = ref.region.row_count * ref.region.head_count;
  if (covered == 0) return 0;
  return covered == cells ? 1 : -1;
}

void PlanBuilder::mark_state(int rank, const SlotRef& ref) {
  if (state_status(rank, ref) == 0) states_[rank].push_back({ref.slot, ref.region});
}

int PlanBuilder::emit_attention(int rank, const TileRef& q, const std::vector<TileRef>& kv,
                                const TileRef& state, HeadRange heads, const std::string& note) {
  const AttentionShape& s = plan_.shape;
  if (q.tokens.count == 0 || heads.count() <= 0) return 0;
  std::vector<const TileRef*> visible;
  for (const TileRef& t : kv) {
    if (!fully_masked(q.tokens, t.tokens, s.causal)) visible.push_back(&t);
  }
  if (visible.empty()) return 0;
  // Split the query heads at multiples of the GQA group so every call is either whole groups
  // or part of one group: then call-local head i reads call-local kv head i / (nq / nk).
  const int g = s.group_size();
  std::vector<HeadRange> pieces;
  int h = heads.begin;
  while (h < heads.end) {
    int next;
    if (h % g != 0) {
      next = std::min(heads.end, (h / g + 1) * g);
    } else if (heads.end - h >= g) {
      next = h + (heads.end - h) / g * g;
    } else {
      next = heads.end;
    }
    pieces.push_back({h, next});
    h = next;
  }
  int emitted = 0;
  for (const HeadRange& piece : pieces) {
    const HeadRange kvh = kv_heads_for(piece, g);
    Step step;
    step.kind = StepKind::kCompute;
    step.stream = kComputeStream;
    step.note = note;
    ComputeSpec& c = step.compute;
    c.q = {q.heads(piece.begin, piece.count()), q.tokens, piece.begin};
    for (const TileRef* t : visible) {
      c.kv.push_back({t->heads(kvh.begin, kvh.count()), t->tokens, kvh.begin});
    }
    c.causal = s.causal;
    c.state = state.heads(piece.begin, piece.count());
    const int status = state_status(rank, c.state);
    TESSERA_CHECK(status >= 0, ErrorCode::kInternal, "planner ", plan_.method, ": rank ", rank,
                  " accumulates into a partly initialized state ", c.state.region.to_string());
    c.accumulate = status == 1;
    if (!c.accumulate) states_[rank].push_back({c.state.slot, c.state.region});
    add(rank, std::move(step));
    ++emitted;
  }
  return emitted;
}

int PlanBuilder::emit_merge(int rank, const SlotRef& src, const SlotRef& dst,
                            const std::string& note) {
  Step step;
  step.kind = StepKind::kMerge;
  step.stream = kComputeStream;
  step.note = note;
  step.src = src;
  step.dst = dst;
  const int status = state_status(rank, dst);
  TESSERA_CHECK(status >= 0, ErrorCode::kInternal, "planner ", plan_.method, ": rank ", rank,
                " merges into a partly initialized state ", dst.region.to_string());
  step.overwrite = status == 0;
  if (step.overwrite) states_[rank].push_back({dst.slot, dst.region});
  return add(rank, std::move(step));
}

int PlanBuilder::emit_finalize(int rank, const SlotRef& src, const SlotRef& dst,
                               const std::string& note) {
  Step step;
  step.kind = StepKind::kFinalize;
  step.stream = kComputeStream;
  step.note = note;
  step.src = src;
  step.dst = dst;
  return add(rank, std::move(step));
}

}  // namespace tessera::sp::detail
