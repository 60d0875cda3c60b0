// The plan validator (see validator.h for what it proves). Three passes:
//   1. structure: every id, slot, region, byte count, link, group and signal is consistent;
//   2. coverage: tokens are refined into atoms and every (q atom, kv atom, head) cell is
//      counted over all compute steps;
//   3. abstract execution: steps run in some order allowed by streams, deps and the
//      communication semantics, with vector clocks giving happens-before. Each step's reads
//      and writes are checked against the earlier conflicting accesses of the same region
//      (they must be ordered), and a content map per slot says what the data is, so every
//      read can be compared with what the step expects.
#include "tessera/sp/validator.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "tessera/core/error.h"

namespace tessera::sp {

std::string ValidationReport::to_string(size_t max_errors) const {
  if (errors.empty()) return "plan is valid";
  std::string s = str(errors.size(), " error", errors.size() == 1 ? "" : "s", ":");
  for (size_t i = 0; i < errors.size() && i < max_errors; ++i) s += "\n  " + errors[i];
  if (errors.size() > max_errors) s += str("\n  ... and ", errors.size() - max_errors, " more");
  return s;
}

namespace {

constexpr size_t kMaxErrors = 200;
// Streams per rank a plan may use (planners use a handful); bounds the validator's tables.
constexpr int kMaxStreams = 64;
constexpr int kMaxCoverageMessages = 8;
// The validator's tables grow with the plan's tokens (an atom id each) and with (q atom, kv
// atom, head) cells (18 bytes each); past these it refuses rather than exhaust memory. Far
// beyond what a machine can run (2^28 tokens of one head of D 64 in bf16 are 32 GiB a tensor).
constexpr int64_t kMaxCheckedTokens = int64_t(1) << 28;
constexpr int64_t kMaxCoverageCells = int64_t(1) << 27;

using Clock = std::vector<int32_t>;

void join_into(Clock& a, const Clock& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);
}

bool leq(const Clock& a, const Clock& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b[i]) return false;
  }
  return true;
}

using Contrib = std::shared_ptr<const std::vector<int16_t>>;  // count per kv atom

struct StepRef {
  int rank = -1;
  int index = -1;
};

// What a rectangle of a slot holds: row i is token tokens.at(i), head column j is global head
// first_head + j; partial states and outputs also carry which kv atoms were folded in.
struct Content {
  TokenRun tokens;
  int first_head = 0;
  Contrib contrib;
  bool final = false;
  StepRef writer;  // the step that put it there (rank -1: the caller's input)
};

struct Rect {
  Region region;
  Content content;
};

// `c` restricted to the sub-rectangle `sub` of `whole`.
Content rebase(const Content& c, const Region& whole, const Region& sub) {
  Content out = c;
  out.tokens = c.tokens.sub(sub.row_begin - whole.row_begin, sub.row_count);
  out.first_head = c.first_head + (sub.head_begin - whole.head_begin);
  return out;
}

Region intersect(const Region& a, const Region& b) {
  Region r;
  r.row_begin = std::max(a.row_begin, b.row_begin);
  r.head_begin = std::max(a.head_begin, b.head_begin);
  r.row_count = std::max<int64_t>(
      0, std::min(a.row_begin + a.row_count, b.row_begin + b.row_count) - r.row_begin);
  r.head_count = std::max(
      0, std::min(a.head_begin + a.head_count, b.head_begin + b.head_count) - r.head_begin);
  return r;
}

// Moves `r` (inside `from`) to the same relative place inside `to`.
Region translate(const Region& r, const Region& from, const Region& to) {
  return {to.row_begin + (r.row_begin - from.row_begin), r.row_count,
          to.head_begin + (r.head_begin - from.head_begin), r.head_count};
}

// The disjoint rectangles of what a slot holds.
class SlotContent {
 public:
  // The pieces of `region` that hold data; `covered` gets how many cells they cover.
  std::vector<Rect> read(const Region& region, int64_t* covered) const {
    std::vector<Rect> pieces;
    int64_t cells = 0;
    for (const Rect& rect : rects_) {
      Region sub = intersect(rect.region, region);
      if (sub.empty()) continue;
      pieces.push_back({sub, rebase(rect.content, rect.region, sub)});
      cells += sub.row_count * sub.head_count;
    }
    *covered = cells;
    std::sort(pieces.begin(), pieces.end(), [](const Rect& a, const Rect& b) {
      return std::tie(a.region.row_begin, a.region.head_begin) <
             std::tie(b.region.row_begin, b.region.head_begin);
    });
    return pieces;
  }

  void write(const Region& region, const std::vector<Rect>& pieces) {
    std::vector<Rect> kept;
    for (const Rect& rect : rects_) {
      if (!rect.region.overlaps(region)) {
        kept.push_back(rect);
        continue;
      }
      const Region& a = rect.region;
      const Region in = intersect(a, region);
      auto keep = [&](Region part) {
        if (!part.empty()) kept.push_back({part, rebase(rect.content, a, part)});
      };
      keep({a.row_begin, in.row_begin - a.row_begin, a.head_begin, a.head_count});
      keep({in.row_begin + in.row_count, a.row_begin + a.row_count - in.row_begin - in.row_count,
            a.head_begin, a.head_count});
      keep({in.row_begin, in.row_count, a.head_begin, in.head_begin - a.head_begin});
      keep({in.row_begin, in.row_count, in.head_begin + in.head_count,
            a.head_begin + a.head_count - in.head_begin - in.head_count});
    }
    for (const Rect& p : pieces) {
      if (!p.region.empty()) kept.push_back(p);
    }
    rects_ = std::move(kept);
  }

 private:
  std::vector<Rect> rects_;
};

struct StepState {
  bool started = false;
  bool ended = false;
  Clock start;
  Clock end;
};

struct Access {
  StepRef step;
  Region region;
  bool write = false;
};

struct SlotAccesses {
  std::vector<Access> reads;
  std::vector<Access> writes;
};

struct TwoSidedUse {
  StepRef step;
  const Transfer* transfer = nullptr;
};

class Validator {
 public:
  explicit Validator(const Plan& plan) : plan_(plan) {}

  ValidationReport run() {
    check_size();
    if (check_structure()) {
      build_atoms();
      check_coverage();
      execute();
      check_outputs();
    }
    return std::move(report_);
  }

 private:
  // Refuses a plan too large to check before any table is built (the per-head checks of the
  // structure pass alone would take minutes for 2^31 heads). Fields that are merely invalid
  // are left to check_structure to report.
  void check_size() const {
    const AttentionShape& s = plan_.shape;
    const bool too_many_tokens =
        s.seq_len > kMaxCheckedTokens || s.joint_tokens > kMaxCheckedTokens ||
        (s.seq_len >= 0 && s.joint_tokens >= 0 && s.seq_len + s.joint_tokens > kMaxCheckedTokens);
    TESSERA_CHECK(!too_many_tokens, ErrorCode::kUnsupported, "validate_plan: ", s.seq_len, " + ",
                  s.joint_tokens, " tokens: plans of at most 2^28 tokens can be checked");
    // Every head is at least one coverage cell.
    TESSERA_CHECK(s.heads <= kMaxCoverageCells, ErrorCode::kUnsupported, "validate_plan: ",
                  s.heads, " heads: plans of at most 2^27 coverage cells can be checked");
  }

  // ---- messages ------------------------------------------------------------------------
  void error(const std::string& message) {
    if (report_.errors.size() < kMaxErrors) report_.errors.push_back(message);
  }

  const Step& step_at(StepRef s) const { return plan_.ranks[s.rank].steps[s.index]; }

  std::string where(StepRef s) const {
    const Step& step = step_at(s);
    std::string w = str("rank ", s.rank, " step ", s.index, " (", step_kind_name(step.kind));
    if (!step.note.empty()) w += str(" '", step.note, "'");
    return w + ")";
  }

  std::string slot_name(int rank, int slot) const {
    return str("'", plan_.ranks[rank].slots[slot].name, "'");
  }

  std::string atom_text(int atom) const {
    const AtomInfo& a = atoms_[atom];
    if (a.size == 1) return str("token ", a.min_pos);
    return str(a.size, " tokens in [", a.min_pos, ",", a.max_pos, "]");
  }

  // ---- 1. structure --------------------------------------------------------------------
  bool region_ok(int rank, const SlotRef& ref, StepRef at, const char* what) {
    const RankPlan& rp = plan_.ranks[rank];
    if (ref.slot < 0 || ref.slot >= int(rp.slots.size())) {
      error(str(where(at), ": ", what, " slot = ", ref.slot, " is not a slot of rank ", rank,
                " (it has ", rp.slots.size(), ")"));
      return false;
    }
    const SlotDesc& slot = rp.slots[ref.slot];
    const Region& r = ref.region;
    // Written so that no sum can overflow, whatever the plan holds.
    if (r.row_begin < 0 || r.row_count < 0 || r.row_begin > slot.rows ||
        r.row_count > slot.rows - r.row_begin || r.head_begin < 0 || r.head_count < 0 ||
        r.head_begin > slot.heads || r.head_count > slot.heads - r.head_begin) {
      error(str(where(at), ": ", what, " ", r.to_string(), " is outside slot ",
                slot_name(rank, ref.slot), " of rank ", rank, " (", slot.rows, " rows, ",
                slot.heads, " heads)"));
      return false;
    }
    return true;
  }

  SlotKind kind_of(int rank, const SlotRef& ref) const {
    return plan_.ranks[rank].slots[ref.slot].kind;
  }

  bool expect_kind(int rank, const SlotRef& ref, SlotKind kind, StepRef at, const char* what) {
    if (kind_of(rank, ref) == kind) return true;
    error(str(where(at), ": ", what, " slot ", slot_name(rank, ref.slot), " is a ",
              slot_kind_name(kind_of(rank, ref)), " slot, expected ", slot_kind_name(kind)));
    return false;
  }

  bool check_transfer(StepRef at, const Step& step, const Transfer& t) {
    const int P = plan_.world_size;
    if (t.src_rank < 0 || t.src_rank >= P || t.dst_rank < 0 || t.dst_rank >= P) {
      error(str(where(at), ": transfer ", t.id, " from rank ", t.src_rank, " to rank ", t.dst_rank,
                ": expected ranks in 0..", P - 1));
      return false;
    }
    bool ok = true;
    const int r = at.rank;
    switch (step.kind) {
      case StepKind::kSendRecv:
      case StepKind::kAllToAll:
        if (t.src_rank != r && t.dst_rank != r) {
          error(str(where(at), ": transfer ", t.id, " from rank ", t.src_rank, " to rank ",
                    t.dst_rank, " does not involve this rank"));
          ok = false;
        }
        break;
      case StepKind::kPut:
        if (t.src_rank != r) {
          error(str(where(at), ": put transfer ", t.id, " has source rank ", t.src_rank,
                    ", expected the initiating rank ", r));
          ok = false;
        }
        break;
      case StepKind::kGet:
        if (t.dst_rank != r) {
          error(str(where(at), ": get transfer ", t.id, " has destination rank ", t.dst_rank,
                    ", expected the initiating rank ", r));
          ok = false;
        }
        break;
      default:
        break;
    }
    if (t.src_rank == t.dst_rank) {
      error(str(where(at), ": transfer ", t.id, " goes from rank ", t.src_rank,
                " to itself; a local move is not a transfer"));
      ok = false;
    }
    if (!region_ok(t.src_rank, t.src, at, "transfer source") ||
        !region_ok(t.dst_rank, t.dst, at, "transfer destination")) {
      return false;
    }
    const SlotKind sk = kind_of(t.src_rank, t.src);
    const SlotKind dk = kind_of(t.dst_rank, t.dst);
    if (sk != dk) {
      error(str(where(at), ": transfer ", t.id, " moves a ", slot_kind_name(sk), " slot into a ",
                slot_kind_name(dk), " slot"));
      ok = false;
    }
    if (t.src.region.row_count != t.dst.region.row_count ||
        t.src.region.head_count != t.dst.region.head_count) {
      error(str(where(at), ": transfer ", t.id, " source ", t.src.region.to_string(),
                " and destination ", t.dst.region.to_string(), " differ in shape"));
      ok = false;
    }
    const int64_t bytes = region_bytes(plan_.shape, sk, t.src.region);
    if (t.bytes != bytes) {
      error(str(where(at), ": transfer ", t.id, " says ", t.bytes, " bytes, its region holds ",
                bytes));
      ok = false;
    }
    const LinkClass link = plan_.links[size_t(t.src_rank) * P + t.dst_rank];
    if (t.link != link) {
      error(str(where(at), ": transfer ", t.id, " says link ", link_class_name(t.link),
                ", the topology links rank ", t.src_rank, " and ", t.dst_rank, " by ",
                link_class_name(link)));
      ok = false;
    }
    return ok;
  }

  bool check_group(StepRef at, const std::vector<int>& group) {
    bool sorted = std::is_sorted(group.begin(), group.end()) &&
                  std::adjacent_find(group.begin(), group.end()) == group.end();
    bool in_range = std::all_of(group.begin(), group.end(),
                                [&](int g) { return g >= 0 && g < plan_.world_size; });
    bool has_self = std::find(group.begin(), group.end(), at.rank) != group.end();
    if (!sorted || !in_range || !has_self) {
      std::string g;
      for (int m : group) g += str(" ", m);
      error(str(where(at), ": group [", g, " ] must be ascending distinct ranks that include ",
                at.rank));
      return false;
    }
    return true;
  }

  // The run's positions increase and lie in [0, total); decided without computing any
  // position that could overflow (a corrupt plan may hold any values).
  static bool increasing_inside(const TokenRun& t, int64_t total) {
    if (t.start < 0 || t.start >= total) return false;
    if (t.count == 1) return true;
    return t.stride > 0 && t.count - 1 <= (total - 1 - t.start) / t.stride;
  }

  bool check_operand(StepRef at, const AttnOperand& op, SlotKind kind, const char* what) {
    if (!region_ok(at.rank, op.ref, at, what) || !expect_kind(at.rank, op.ref, kind, at, what)) {
      return false;
    }
    bool ok = true;
    if (op.positions.count != op.ref.region.row_count) {
      error(str(where(at), ": ", what, " names ", op.positions.count, " positions for ",
                op.ref.region.row_count, " rows"));
      ok = false;
    }
    const int64_t total = plan_.shape.total_tokens();
    if (op.positions.count > 0 && !increasing_inside(op.positions, total)) {
      error(str(where(at), ": ", what, " positions ", op.positions.to_string(),
                " leave the sequence [0,", total, ") or do not increase"));
      ok = false;
    }
    const int heads = kind == SlotKind::kKV ? plan_.shape.kv_heads : plan_.shape.heads;
    const int64_t head_end = int64_t(op.first_head) + op.ref.region.head_count;
    if (op.first_head < 0 || head_end > heads) {
      error(str(where(at), ": ", what, " heads [", op.first_head, ",", head_end,
                ") are outside the ", heads, " ", kind == SlotKind::kKV ? "kv" : "query",
                " heads"));
      ok = false;
    }
    return ok;
  }

  bool check_compute(StepRef at, const Step& step) {
    const ComputeSpec& c = step.compute;
    bool ok = check_operand(at, c.q, SlotKind::kQ, "q operand");
    if (c.kv.empty()) {
      error(str(where(at), ": compute has no kv operand"));
      ok = false;
    }
    for (const AttnOperand& kv : c.kv)
      ok = check_operand(at, kv, SlotKind::kKV, "kv operand") && ok;
    if (!region_ok(at.rank, c.state, at, "state") ||
        !expect_kind(at.rank, c.state, SlotKind::kPartial, at, "state")) {
      return false;
    }
    if (!ok) return false;
    if (c.state.region.row_count != c.q.ref.region.row_count ||
        c.state.region.head_count != c.q.ref.region.head_count) {
      error(str(where(at), ": state ", c.state.region.to_string(), " differs in shape from q ",
                c.q.ref.region.to_string()));
      ok = false;
    }
    if (c.causal != plan_.shape.causal) {
      error(str(where(at), ": compute causal = ", c.causal, " but the plan's attention is ",
                plan_.shape.causal ? "causal" : "not causal"));
      ok = false;
    }
    // GQA: call-local head i of q uses call-local kv head i / (nq / nk); that must be the
    // global kv head (first_head + i) / group_size.
    const int g = plan_.shape.group_size();
    const int nq = c.q.ref.region.head_count;
    for (const AttnOperand& kv : c.kv) {
      const int nk = kv.ref.region.head_count;
      if (nk <= 0 || nq % nk != 0) {
        error(str(where(at), ": ", nq, " query heads cannot share ", nk, " kv heads evenly"));
        ok = false;
        continue;
      }
      for (int i = 0; i < nq; ++i) {
        const int want = (c.q.first_head + i) / g;
        const int got = kv.first_head + i / (nq / nk);
        if (want != got) {
          error(str(where(at), ": query head ", c.q.first_head + i, " would read kv head ", got,
                    ", GQA (group ", g, ") needs kv head ", want));
          ok = false;
          break;
        }
      }
    }
    return ok;
  }

  bool check_structure() {
    const Plan& p = plan_;
    const AttentionShape& s = p.shape;
    bool ok = true;
    if (p.world_size < 1 || int(p.ranks.size()) != p.world_size ||
        int(p.machine_of_rank.size()) != p.world_size ||
        p.links.size() != size_t(p.world_size) * p.world_size || p.num_streams < 1 ||
        p.num_streams > kMaxStreams) {
      error(str("plan has world_size ", p.world_size, ", ", p.ranks.size(), " rank programs, ",
                p.machine_of_rank.size(), " machine entries, ", p.links.size(), " links and ",
                p.num_streams, " streams: expected P, P, P, P*P and 1..", kMaxStreams));
      return false;
    }
    if (const std::string problem = shape_error(s); !problem.empty()) {
      error(str("plan shape ", s.to_string(), " is invalid: ", problem));
      return false;
    }
    P_ = p.world_size;
    S_ = p.num_streams;
    owned_.resize(P_);
    for (int r = 0; r < P_; ++r) {
      owned_[r] = owned_image_tokens(p.layout, s.seq_len, s.joint_tokens, P_, r);
    }
    // Bound slots.
    bound_.assign(P_, std::map<SlotBinding, int>());
    for (int r = 0; r < P_; ++r) {
      const RankPlan& rp = p.ranks[r];
      for (int i = 0; i < int(rp.slots.size()); ++i) {
        const SlotDesc& slot = rp.slots[i];
        if (slot.rows < 0 || slot.heads < 0) {
          error(str("rank ", r, " slot ", slot_name(r, i), " has ", slot.rows, " rows and ",
                    slot.heads, " heads"));
          ok = false;
        }
        if (slot.binding == SlotBinding::kWorkspace) continue;
        if (bound_[r].count(slot.binding)) {
          error(str("rank ", r, " binds ", slot_binding_name(slot.binding), " twice (slots ",
                    slot_name(r, bound_[r][slot.binding]), " and ", slot_name(r, i), ")"));
          ok = false;
        }
        bound_[r][slot.binding] = i;
        const int64_t own = run_rows(owned_[r]);
        struct Want {
          SlotKind kind;
          int64_t rows;
          int heads;
        };
        Want want{};
        switch (slot.binding) {
          case SlotBinding::kInputQ:
            want = {SlotKind::kQ, own, s.heads};
            break;
          case SlotBinding::kInputKV:
            want = {SlotKind::kKV, own, s.kv_heads};
            break;
          case SlotBinding::kOutput:
            want = {SlotKind::kO, own, s.heads};
            break;
          case SlotBinding::kJointQ:
            want = {SlotKind::kQ, s.joint_tokens, s.heads};
            break;
          case SlotBinding::kJointKV:
            want = {SlotKind::kKV, s.joint_tokens, s.kv_heads};
            break;
          case SlotBinding::kJointOutput:
            want = {SlotKind::kO, s.joint_tokens, s.heads};
            break;
          case SlotBinding::kWorkspace:
            break;
        }
        if (slot.kind != want.kind || slot.rows != want.rows || slot.heads != want.heads) {
          error(str("rank ", r, " slot ", slot_name(r, i), " bound to ",
                    slot_binding_name(slot.binding), " is ", slot_kind_name(slot.kind), " ",
                    slot.rows, " rows x ", slot.heads, " heads, expected ",
                    slot_kind_name(want.kind), " ", want.rows, " x ", want.heads));
          ok = false;
        }
      }
      std::vector<SlotBinding> needed = {SlotBinding::kInputQ, SlotBinding::kInputKV,
                                         SlotBinding::kOutput};
      if (s.joint_tokens > 0) {
        needed.insert(needed.end(),
                      {SlotBinding::kJointQ, SlotBinding::kJointKV, SlotBinding::kJointOutput});
      }
      for (SlotBinding b : needed) {
        if (!bound_[r].count(b)) {
          error(str("rank ", r, " has no slot bound to ", slot_binding_name(b)));
          ok = false;
        }
      }
    }
    // Slot ids mean the same buffer on every rank (same name and kind; sizes may differ), so
    // an executor can place slot i at one symmetric offset everywhere.
    for (int r = 1; r < P_; ++r) {
      const auto& a = p.ranks[0].slots;
      const auto& b = p.ranks[r].slots;
      for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (a[i].name != b[i].name || a[i].kind != b[i].kind) {
          error(str("slot ", i, " is '", a[i].name, "' (", slot_kind_name(a[i].kind),
                    ") on rank 0 but '", b[i].name, "' (", slot_kind_name(b[i].kind), ") on rank ",
                    r, ": a slot id must name the same buffer on every rank"));
          ok = false;
        }
      }
    }
    if (!ok) return false;

    // Steps.
    std::map<int, std::vector<TwoSidedUse>> two_sided;
    std::map<int, StepRef> one_sided;
    for (int r = 0; r < P_; ++r) {
      const RankPlan& rp = p.ranks[r];
      for (int i = 0; i < int(rp.steps.size()); ++i) {
        const Step& step = rp.steps[i];
        const StepRef at{r, i};
        if (step.stream < 0 || step.stream >= S_) {
          error(str(where(at), ": stream ", step.stream, " is not in 0..", S_ - 1));
          ok = false;
        }
        for (int d : step.deps) {
          if (d < 0 || d >= i) {
            error(str(where(at), ": dependency ", d, " is not an earlier step of rank ", r));
            ok = false;
          }
        }
        switch (step.kind) {
          case StepKind::kSendRecv:
          case StepKind::kAllToAll:
          case StepKind::kPut:
          case StepKind::kGet:
            if (step.kind == StepKind::kAllToAll && !check_group(at, step.group)) ok = false;
            for (const Transfer& t : step.transfers) {
              if (!check_transfer(at, step, t)) {
                ok = false;
                continue;
              }
              if (step.kind == StepKind::kAllToAll &&
                  (!std::binary_search(step.group.begin(), step.group.end(), t.src_rank) ||
                   !std::binary_search(step.group.begin(), step.group.end(), t.dst_rank))) {
                error(str(where(at), ": transfer ", t.id, " from rank ", t.src_rank, " to ",
                          t.dst_rank, " leaves the all-to-all group"));
                ok = false;
              }
              if (step.kind == StepKind::kSendRecv || step.kind == StepKind::kAllToAll) {
                two_sided[t.id].push_back({at, &t});
              } else if (one_sided.count(t.id) || two_sided.count(t.id)) {
                error(str(where(at), ": transfer id ", t.id, " is used more than once"));
                ok = false;
              } else {
                one_sided[t.id] = at;
              }
            }
            if (step.kind == StepKind::kPut && step.signal_id >= 0) {
              for (const Transfer& t : step.transfers) {
                if (t.dst_rank >= 0 && t.dst_rank < P_ &&
                    step.signal_id >= p.ranks[t.dst_rank].num_signals) {
                  error(str(where(at), ": signal ", step.signal_id, " is not a signal of rank ",
                            t.dst_rank, " (it has ", p.ranks[t.dst_rank].num_signals, ")"));
                  ok = false;
                }
              }
            }
            break;
          case StepKind::kCompute:
            if (!check_compute(at, step)) ok = false;
            break;
          case StepKind::kMerge:
          case StepKind::kFinalize: {
            const bool fin = step.kind == StepKind::kFinalize;
            if (!region_ok(r, step.src, at, "source") || !region_ok(r, step.dst, at, "target")) {
              ok = false;
              break;
            }
            ok = expect_kind(r, step.src, SlotKind::kPartial, at, "source") && ok;
            ok = expect_kind(r, step.dst, fin ? SlotKind::kO : SlotKind::kPartial, at, "target") &&
                 ok;
            if (step.src.region.row_count != step.dst.region.row_count ||
                step.src.region.head_count != step.dst.region.head_count) {
              error(str(where(at), ": source ", step.src.region.to_string(), " and target ",
                        step.dst.region.to_string(), " differ in shape"));
              ok = false;
            }
            break;
          }
          case StepKind::kSignal:
            if (step.signal_rank < 0 || step.signal_rank >= P_ || step.signal_id < 0 ||
                step.signal_id >= p.ranks[step.signal_rank].num_signals) {
              error(str(where(at), ": signal ", step.signal_id, " of rank ", step.signal_rank,
                        " does not exist"));
              ok = false;
            }
            break;
          case StepKind::kWait:
            if (step.signal_id < 0 || step.signal_id >= rp.num_signals || step.signal_value < 1) {
              error(str(where(at), ": waits for signal ", step.signal_id, " to reach ",
                        step.signal_value, ": expected a signal in 0..", rp.num_signals - 1,
                        " and a value >= 1"));
              ok = false;
            }
            break;
          case StepKind::kBarrier:
            if (!check_group(at, step.group)) ok = false;
            break;
        }
      }
    }
    if (!ok) return false;

    // Two-sided transfers: listed once by the sender and once by the receiver, identically,
    // on the same stream index.
    for (auto& [id, uses] : two_sided) {
      const Transfer& t = *uses[0].transfer;
      bool src_seen = false;
      bool dst_seen = false;
      for (const TwoSidedUse& u : uses) {
        src_seen |= u.step.rank == t.src_rank;
        dst_seen |= u.step.rank == t.dst_rank;
      }
      if (uses.size() != 2 || !src_seen || !dst_seen) {
        error(str(where(uses[0].step), ": two-sided transfer ", id, " from rank ", t.src_rank,
                  " to rank ", t.dst_rank, " must be listed by both (it is listed ", uses.size(),
                  " time", uses.size() == 1 ? "" : "s", src_seen ? ", by the sender" : "",
                  dst_seen ? ", by the receiver" : "", ")"));
        ok = false;
        continue;
      }
      const Transfer& a = *uses[0].transfer;
      const Transfer& b = *uses[1].transfer;
      const bool same = a.src_rank == b.src_rank && a.dst_rank == b.dst_rank &&
                        a.src.slot == b.src.slot && a.dst.slot == b.dst.slot &&
                        a.src.region.row_begin == b.src.region.row_begin &&
                        a.src.region.row_count == b.src.region.row_count &&
                        a.src.region.head_begin == b.src.region.head_begin &&
                        a.src.region.head_count == b.src.region.head_count &&
                        a.dst.region.row_begin == b.dst.region.row_begin &&
                        a.dst.region.row_count == b.dst.region.row_count &&
                        a.dst.region.head_begin == b.dst.region.head_begin &&
                        a.dst.region.head_count == b.dst.region.head_count;
      const Step& sa = step_at(uses[0].step);
      const Step& sb = step_at(uses[1].step);
      if (!same) {
        error(str(where(uses[0].step), " and ", where(uses[1].step), " list transfer ", id,
                  " differently"));
        ok = false;
      }
      if (sa.kind != sb.kind || sa.stream != sb.stream) {
        error(str(where(uses[0].step), " and ", where(uses[1].step), " share transfer ", id,
                  " but run on ", step_kind_name(sa.kind), "/stream ", sa.stream, " vs ",
                  step_kind_name(sb.kind), "/stream ", sb.stream,
                  ": two-sided partners need the same kind and stream"));
        ok = false;
      }
      const StepRef src = uses[0].step.rank == t.src_rank ? uses[0].step : uses[1].step;
      const StepRef dst = uses[0].step.rank == t.src_rank ? uses[1].step : uses[0].step;
      partner_[id] = {src, dst};
      transfer_of_[id] = uses[0].transfer;
    }
    if (!ok) return false;
    check_pair_order();

    // Collectives and barriers: the k-th occurrence of a group on each member matches.
    for (StepKind kind : {StepKind::kAllToAll, StepKind::kBarrier}) {
      std::map<std::pair<std::vector<int>, int>, std::vector<StepRef>> instances;
      for (int r = 0; r < P_; ++r) {
        std::map<std::vector<int>, int> seen;
        for (int i = 0; i < int(p.ranks[r].steps.size()); ++i) {
          const Step& step = p.ranks[r].steps[i];
          if (step.kind != kind) continue;
          instances[{step.group, seen[step.group]++}].push_back({r, i});
        }
      }
      for (auto& [key, members] : instances) {
        const std::vector<int>& group = key.first;
        std::vector<int> ranks;
        for (const StepRef& m : members) ranks.push_back(m.rank);
        if (ranks != group) {
          std::string g;
          for (int m : group) g += str(" ", m);
          error(str(where(members[0]), ": ", step_kind_name(kind), " #", key.second, " of group [",
                    g, " ] is run by ", members.size(),
                    " of its members; every member must run it"));
          ok = false;
          continue;
        }
        const int stream = step_at(members[0]).stream;
        for (const StepRef& m : members) {
          if (step_at(m).stream != stream) {
            error(str(where(m), ": ", step_kind_name(kind), " runs on stream ", step_at(m).stream,
                      " but rank ", members[0].rank, " runs it on stream ", stream));
            ok = false;
          }
          collective_of_[{m.rank, m.index}] = int(collectives_.size());
        }
        collectives_.push_back(members);
      }
    }
    // All-to-all transfers must be listed by partners within the same instance.
    for (const auto& [id, pr] : partner_) {
      if (step_at(pr.first).kind != StepKind::kAllToAll) continue;
      if (collective_of_[{pr.first.rank, pr.first.index}] !=
          collective_of_[{pr.second.rank, pr.second.index}]) {
        error(str(where(pr.first), " and ", where(pr.second), " share transfer ", id,
                  " but are different all-to-all calls"));
        ok = false;
      }
    }

    // Signals: each waited signal is waited once, for all its raises.
    for (int r = 0; r < P_; ++r) {
      for (int i = 0; i < int(p.ranks[r].steps.size()); ++i) {
        const Step& step = p.ranks[r].steps[i];
        if (step.kind == StepKind::kSignal) ++raises_total_[{step.signal_rank, step.signal_id}];
        if (step.kind == StepKind::kPut && step.signal_id >= 0) {
          std::set<int> dsts;
          for (const Transfer& t : step.transfers) dsts.insert(t.dst_rank);
          for (int d : dsts) ++raises_total_[{d, step.signal_id}];
        }
      }
    }
    std::map<std::pair<int, int>, int> waits;
    for (int r = 0; r < P_; ++r) {
      for (int i = 0; i < int(p.ranks[r].steps.size()); ++i) {
        const Step& step = p.ranks[r].steps[i];
        if (step.kind != StepKind::kWait) continue;
        const std::pair<int, int> key{r, step.signal_id};
        const int total = raises_total_[key];
        if (++waits[key] > 1) {
          error(str(where({r, i}), ": signal ", step.signal_id,
                    " is waited on more than once; give each wait its own signal"));
          ok = false;
        }
        if (step.signal_value != total) {
          error(str(where({r, i}), ": waits for signal ", step.signal_id, " to reach ",
                    step.signal_value, " but the plan raises it ", total, " time",
                    total == 1 ? "" : "s"));
          ok = false;
        }
      }
    }
    return ok;
  }

  // Two-sided transfers between one sender and one receiver on one stream are matched in
  // order (NCCL): both sides must list them in the same order.
  void check_pair_order() {
    using Key = std::tuple<int, int, int>;  // src, dst, stream
    std::map<Key, std::vector<int>> sends, recvs;
    for (int r = 0; r < P_; ++r) {
      const RankPlan& rp = plan_.ranks[r];
      for (const Step& step : rp.steps) {
        if (step.kind != StepKind::kSendRecv && step.kind != StepKind::kAllToAll) continue;
        std::map<Key, std::vector<int>> s_ids, r_ids;
        for (const Transfer& t : step.transfers) {
          const Key key{t.src_rank, t.dst_rank, step.stream};
          (t.src_rank == r ? s_ids : r_ids)[key].push_back(t.id);
        }
        // Inside one step (one NCCL group) order does not matter.
        for (auto& [key, ids] : s_ids) {
          std::sort(ids.begin(), ids.end());
          sends[key].insert(sends[key].end(), ids.begin(), ids.end());
        }
        for (auto& [key, ids] : r_ids) {
          std::sort(ids.begin(), ids.end());
          recvs[key].insert(recvs[key].end(), ids.begin(), ids.end());
        }
      }
    }
    for (const auto& [key, ids] : sends) {
      if (recvs[key] != ids) {
        error(str("two-sided transfers from rank ", std::get<0>(key), " to rank ", std::get<1>(key),
                  " on stream ", std::get<2>(key), " are sent and received in different orders"));
      }
    }
  }

  // ---- 2. atoms and coverage ------------------------------------------------------------
  struct AtomInfo {
    int64_t min_pos = 0;
    int64_t max_pos = 0;
    int64_t size = 0;
  };

  static std::tuple<int64_t, int64_t, int64_t> run_key(const TokenRun& run) {
    return {run.start, run.count > 1 ? run.stride : 1, run.count};
  }

  void build_atoms() {
    const int64_t total = plan_.shape.total_tokens();
    std::set<std::tuple<int64_t, int64_t, int64_t>> runs;
    auto add = [&](const TokenRun& run) {
      if (run.count > 0) runs.insert(run_key(run));
    };
    if (plan_.shape.joint_tokens > 0) add({0, 1, plan_.shape.joint_tokens});
    for (const auto& owned : owned_) {
      for (const TokenRun& run : owned) add(run);
    }
    for (const RankPlan& rp : plan_.ranks) {
      for (const Step& step : rp.steps) {
        if (step.kind != StepKind::kCompute) continue;
        add(step.compute.q.positions);
        for (const AttnOperand& kv : step.compute.kv) add(kv.positions);
      }
    }
    atom_of_.assign(size_t(total), 0);
    int num = total > 0 ? 1 : 0;
    std::vector<int> remap;
    for (const auto& [start, stride, count] : runs) {
      remap.assign(size_t(num), -1);
      for (int64_t i = 0; i < count; ++i) {
        int& a = atom_of_[size_t(start + i * stride)];
        if (remap[a] < 0) remap[a] = num++;
        a = remap[a];
      }
    }
    // Compact the ids in order of first position.
    std::vector<int> order(size_t(num), -1);
    int next = 0;
    for (int64_t t = 0; t < total; ++t) {
      int& a = atom_of_[size_t(t)];
      if (order[a] < 0) order[a] = next++;
      a = order[a];
    }
    atoms_.assign(size_t(next), AtomInfo{});
    for (int64_t t = 0; t < total; ++t) {
      AtomInfo& info = atoms_[atom_of_[size_t(t)]];
      if (info.size == 0) info.min_pos = t;
      info.max_pos = t;
      ++info.size;
    }
    report_.num_atoms = next;
  }

  // The distinct atoms of a run, ascending.
  const std::vector<int>& atoms_of(const TokenRun& run) {
    auto key = run_key(run);
    auto it = run_atoms_.find(key);
    if (it != run_atoms_.end()) return it->second;
    std::vector<int> atoms;
    for (int64_t i = 0; i < run.count; ++i) atoms.push_back(atom_of_[size_t(run.at(i))]);
    std::sort(atoms.begin(), atoms.end());
    atoms.erase(std::unique(atoms.begin(), atoms.end()), atoms.end());
    return run_atoms_[key] = std::move(atoms);
  }

  // Whether the mask leaves any (q in qa, kv in ka) pair visible.
  bool needed(int qa, int ka) const {
    return !plan_.shape.causal || atoms_[ka].min_pos <= atoms_[qa].max_pos;
  }
  bool partly_masked(int qa, int ka) const {
    return plan_.shape.causal && atoms_[ka].max_pos > atoms_[qa].min_pos;
  }

  void check_coverage() {
    const int A = int(atoms_.size());
    const int H = plan_.shape.heads;
    TESSERA_CHECK(double(A) * A * H <= double(kMaxCoverageCells), ErrorCode::kUnsupported,
                  "validate_plan: ", A, " token atoms x ", A, " x ", H,
                  " heads: plans of at most 2^27 coverage cells can be checked");
    const size_t cells = size_t(A) * A * H;
    std::vector<uint16_t> count(cells, 0);
    std::vector<StepRef> first(cells), second(cells);
    auto cell = [&](int h, int qa, int ka) { return (size_t(h) * A + qa) * A + ka; };
    for (int r = 0; r < P_; ++r) {
      const RankPlan& rp = plan_.ranks[r];
      for (int i = 0; i < int(rp.steps.size()); ++i) {
        const Step& step = rp.steps[i];
        if (step.kind != StepKind::kCompute) continue;
        const ComputeSpec& c = step.compute;
        if (c.q.positions.count == 0) continue;
        const std::vector<int> qatoms = atoms_of(c.q.positions);
        for (const AttnOperand& kv : c.kv) {
          if (kv.positions.count == 0) continue;
          const std::vector<int>& katoms = atoms_of(kv.positions);
          for (int h = c.q.first_head; h < c.q.first_head + c.q.ref.region.head_count; ++h) {
            for (int qa : qatoms) {
              for (int ka : katoms) {
                const size_t k = cell(h, qa, ka);
                if (count[k] == 0) first[k] = {r, i};
                if (count[k] == 1) second[k] = {r, i};
                if (count[k] < 60000) ++count[k];
                ++report_.blocks_computed;
              }
            }
          }
        }
      }
    }
    int missing = 0;
    int doubled = 0;
    for (int h = 0; h < H; ++h) {
      for (int qa = 0; qa < A; ++qa) {
        for (int ka = 0; ka < A; ++ka) {
          if (!needed(qa, ka)) continue;
          ++report_.blocks_needed;
          const size_t k = cell(h, qa, ka);
          if (count[k] == 0 && missing++ < kMaxCoverageMessages) {
            error(str("block q ", atom_text(qa), " x kv ", atom_text(ka), " head ", h,
                      " is never computed"));
          } else if (count[k] > 1 && doubled++ < kMaxCoverageMessages) {
            error(str("block q ", atom_text(qa), " x kv ", atom_text(ka), " head ", h,
                      " is computed ", count[k], " times: by ", where(first[k]), " and by ",
                      where(second[k])));
          }
        }
      }
    }
    if (missing > kMaxCoverageMessages) {
      error(str("... ", missing - kMaxCoverageMessages, " more blocks are never computed"));
    }
    if (doubled > kMaxCoverageMessages) {
      error(str("... ", doubled - kMaxCoverageMessages, " more blocks are computed twice"));
    }
  }

  // ---- 3. abstract execution ------------------------------------------------------------
  int component(int rank, int stream) const { return rank * S_ + stream; }

  void execute() {
    const int P = P_;
    state_.resize(P);
    stream_steps_.assign(P, std::vector<std::vector<int>>(S_));
    stream_pos_.assign(P, std::vector<size_t>(S_, 0));
    content_.resize(P);
    accesses_.resize(P);
    input_clock_.resize(P);
    for (int r = 0; r < P; ++r) {
      const RankPlan& rp = plan_.ranks[r];
      state_[r].resize(rp.steps.size());
      for (int i = 0; i < int(rp.steps.size()); ++i) {
        stream_steps_[r][rp.steps[i].stream].push_back(i);
      }
      content_[r].resize(rp.slots.size());
      accesses_[r].resize(rp.slots.size());
      // Inputs are ready when the rank starts: a virtual event before all its streams.
      input_clock_[r].assign(size_t(P * S_), 0);
      for (int s = 0; s < S_; ++s) input_clock_[r][component(r, s)] = 1;
      seed_inputs(r);
    }

    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < P; ++r) {
        for (int s = 0; s < S_; ++s) {
          // Start the next step of each stream when its predecessor and deps have ended.
          while (stream_pos_[r][s] < stream_steps_[r][s].size()) {
            const int i = stream_steps_[r][s][stream_pos_[r][s]];
            if (state_[r][i].started) break;
            if (!try_start({r, i})) break;
            progress = true;
          }
        }
      }
      for (int r = 0; r < P; ++r) {
        for (int s = 0; s < S_; ++s) {
          size_t& pos = stream_pos_[r][s];
          while (pos < stream_steps_[r][s].size()) {
            const int i = stream_steps_[r][s][pos];
            StepState& st = state_[r][i];
            if (!st.started) break;
            if (!st.ended) {
              if (!try_end({r, i})) break;
              progress = true;
            }
            ++pos;
          }
        }
      }
    }

    // Anything left is stuck.
    int stuck = 0;
    for (int r = 0; r < P; ++r) {
      for (int s = 0; s < S_; ++s) {
        const size_t pos = stream_pos_[r][s];
        if (pos >= stream_steps_[r][s].size()) continue;
        const int i = stream_steps_[r][s][pos];
        if (stuck++ < 6) error(str(where({r, i}), " never completes: ", why_stuck({r, i})));
      }
    }
    if (stuck > 0) {
      error(str("the plan deadlocks: ", stuck, " stream", stuck == 1 ? "" : "s", " cannot finish"));
      deadlocked_ = true;
    }
  }

  void seed_inputs(int r) {
    const AttentionShape& s = plan_.shape;
    for (const auto& [binding, slot] : bound_[r]) {
      std::vector<Rect> rects;
      auto add = [&](int64_t row, TokenRun run, int heads) {
        rects.push_back({{row, run.count, 0, heads}, Content{run, 0, nullptr, false, {}}});
      };
      switch (binding) {
        case SlotBinding::kInputQ:
        case SlotBinding::kInputKV: {
          const int heads = binding == SlotBinding::kInputQ ? s.heads : s.kv_heads;
          int64_t row = 0;
          for (const TokenRun& run : owned_[r]) {
            add(row, run, heads);
            row += run.count;
          }
          break;
        }
        case SlotBinding::kJointQ:
          add(0, {0, 1, s.joint_tokens}, s.heads);
          break;
        case SlotBinding::kJointKV:
          add(0, {0, 1, s.joint_tokens}, s.kv_heads);
          break;
        default:
          continue;
      }
      const SlotDesc& desc = plan_.ranks[r].slots[slot];
      content_[r][slot].write({0, desc.rows, 0, desc.heads}, rects);
    }
  }

  std::string why_stuck(StepRef at) {
    const Step& step = step_at(at);
    const StepState& st = state_[at.rank][at.index];
    if (!st.started) {
      for (int d : step.deps) {
        if (!state_[at.rank][d].ended)
          return str("it waits for its dependency ", where({at.rank, d}));
      }
      return "it waits for the step before it on its stream";
    }
    switch (step.kind) {
      case StepKind::kSendRecv:
        for (const Transfer& t : step.transfers) {
          const StepRef other = partner_of(t.id, at);
          if (!state_[other.rank][other.index].started) {
            return str("transfer ", t.id, " waits for ", where(other), " to start");
          }
        }
        break;
      case StepKind::kAllToAll:
      case StepKind::kBarrier:
        for (const StepRef& m : collectives_[collective_of_[{at.rank, at.index}]]) {
          if (!state_[m.rank][m.index].started) return str("it waits for ", where(m), " to start");
        }
        break;
      case StepKind::kWait: {
        const auto key = std::make_pair(at.rank, step.signal_id);
        return str("signal ", step.signal_id, " has ", raises_[key].size(), " of ",
                   step.signal_value, " raises");
      }
      default:
        break;
    }
    return "it cannot end";
  }

  StepRef partner_of(int id, StepRef self) const {
    const auto& pr = partner_.at(id);
    return pr.first.rank == self.rank && pr.first.index == self.index ? pr.second : pr.first;
  }

  bool try_start(StepRef at) {
    const Step& step = step_at(at);
    const int r = at.rank;
    Clock start = input_clock_[r];
    // The previous step of the same stream.
    const auto& order = stream_steps_[r][step.stream];
    const size_t pos = stream_pos_[r][step.stream];
    if (pos > 0) {
      const StepState& prev = state_[r][order[pos - 1]];
      if (!prev.ended) return false;
      join_into(start, prev.end);
    }
    for (int d : step.deps) {
      const StepState& dep = state_[r][d];
      if (!dep.ended) return false;
      join_into(start, dep.end);
    }
    StepState& st = state_[r][at.index];
    ++start[component(r, step.stream)];
    st.start = std::move(start);
    st.started = true;
    // Two-sided data is captured when both sides are running.
    if (step.kind == StepKind::kSendRecv) {
      for (const Transfer& t : step.transfers) {
        const StepRef other = partner_of(t.id, at);
        if (state_[other.rank][other.index].started) capture(t);
      }
    } else if (step.kind == StepKind::kAllToAll) {
      const auto& members = collectives_[collective_of_[{r, at.index}]];
      const bool all = std::all_of(members.begin(), members.end(), [&](const StepRef& m) {
        return state_[m.rank][m.index].started;
      });
      if (all) {
        for (const StepRef& m : members) {
          for (const Transfer& t : step_at(m).transfers) {
            if (t.src_rank == m.rank) capture(t);
          }
        }
      }
    }
    return true;
  }

  void capture(const Transfer& t) {
    int64_t covered = 0;
    captured_[t.id] = content_[t.src_rank][t.src.slot].read(t.src.region, &covered);
    captured_covered_[t.id] = covered;
  }

  bool try_end(StepRef at) {
    const Step& step = step_at(at);
    const int r = at.rank;
    StepState& st = state_[r][at.index];
    Clock end = st.start;
    switch (step.kind) {
      case StepKind::kSendRecv:
        for (const Transfer& t : step.transfers) {
          const StepRef other = partner_of(t.id, at);
          const StepState& o = state_[other.rank][other.index];
          if (!o.started) return false;
          join_into(end, o.start);
        }
        break;
      case StepKind::kAllToAll:
      case StepKind::kBarrier:
        for (const StepRef& m : collectives_[collective_of_[{r, at.index}]]) {
          const StepState& o = state_[m.rank][m.index];
          if (!o.started) return false;
          join_into(end, o.start);
        }
        break;
      case StepKind::kWait: {
        const auto key = std::make_pair(r, step.signal_id);
        const auto& raised = raises_[key];
        if (int64_t(raised.size()) < step.signal_value) return false;
        for (const Clock& c : raised) join_into(end, c);
        break;
      }
      default:
        break;
    }
    ++end[component(r, step.stream)];
    st.end = std::move(end);
    st.ended = true;
    apply(at);
    return true;
  }

  // ---- effects of a step that just ended -----------------------------------------------
  void record(int rank, int slot, const Region& region, bool write, StepRef by) {
    if (region.empty()) return;
    const StepState& me = state_[by.rank][by.index];
    SlotAccesses& list = accesses_[rank][slot];
    if (write) {
      check_against(list.reads, rank, slot, region, write, by, me);
    }
    check_against(list.writes, rank, slot, region, write, by, me);
    // Accesses inside a region this step writes are ordered before it (or were just
    // reported): anything that conflicts with them later conflicts with this write too.
    if (write) {
      auto inside = [&](const Access& a) {
        const Region& o = a.region;
        return !(a.step.rank == by.rank && a.step.index == by.index) &&
               o.row_begin >= region.row_begin &&
               o.row_begin + o.row_count <= region.row_begin + region.row_count &&
               o.head_begin >= region.head_begin &&
               o.head_begin + o.head_count <= region.head_begin + region.head_count;
      };
      std::erase_if(list.reads, inside);
      std::erase_if(list.writes, inside);
    }
    (write ? list.writes : list.reads).push_back({by, region, write});
    if (by.rank != rank) remote_.push_back({rank, slot, by, region, write});
  }

  void check_against(const std::vector<Access>& earlier, int rank, int slot, const Region& region,
                     bool write, StepRef by, const StepState& me) {
    for (const Access& a : earlier) {
      if (!a.region.overlaps(region)) continue;
      if (a.step.rank == by.rank && a.step.index == by.index) continue;
      const StepState& other = state_[a.step.rank][a.step.index];
      if (leq(other.end, me.start) || leq(me.end, other.start)) continue;
      const Region both = intersect(a.region, region);
      error(str(where(by), (write ? " writes " : " reads "), slot_name(rank, slot), " ",
                both.to_string(), " of rank ", rank, " while ", where(a.step),
                (a.write ? " writes" : " reads"),
                " it: nothing orders the two (a missing dependency, wait or barrier)"));
      return;
    }
  }

  // Reads `ref` of `rank` for step `at`; reports uncovered cells.
  std::vector<Rect> read_content(int rank, const SlotRef& ref, StepRef at, const char* what) {
    int64_t covered = 0;
    std::vector<Rect> pieces = content_[rank][ref.slot].read(ref.region, &covered);
    if (covered != ref.region.row_count * ref.region.head_count) {
      error(str(where(at), ": ", what, " ", slot_name(rank, ref.slot), " ", ref.region.to_string(),
                " of rank ", rank, " holds no data in ",
                ref.region.row_count * ref.region.head_count - covered,
                " of its cells: nothing written there happens before this step"));
    }
    return pieces;
  }

  // Checks that `pieces` of region `region` hold `positions` and heads from `first_head`.
  bool expect_content(const std::vector<Rect>& pieces, const Region& region,
                      const TokenRun& positions, int first_head, StepRef at, const char* what) {
    for (const Rect& p : pieces) {
      const TokenRun want =
          positions.sub(p.region.row_begin - region.row_begin, p.region.row_count);
      const int want_head = first_head + (p.region.head_begin - region.head_begin);
      if (!p.content.tokens.same_positions(want) || p.content.first_head != want_head) {
        error(str(where(at), ": ", what, " ", p.region.to_string(), " holds tokens ",
                  p.content.tokens.to_string(), " heads from ", p.content.first_head,
                  ", the step expects tokens ", want.to_string(), " heads from ", want_head));
        return false;
      }
    }
    return true;
  }

  Contrib add_atoms(const Contrib& base, const std::vector<const TokenRun*>& runs) {
    auto out = std::make_shared<std::vector<int16_t>>(
        base ? *base : std::vector<int16_t>(atoms_.size(), 0));
    for (const TokenRun* run : runs) {
      for (int a : atoms_of(*run)) ++(*out)[a];
    }
    return out;
  }

  void apply(StepRef at) {
    const Step& step = step_at(at);
    const int r = at.rank;
    switch (step.kind) {
      case StepKind::kSendRecv:
      case StepKind::kAllToAll:
        for (const Transfer& t : step.transfers) {
          if (t.src_rank == r) {
            record(r, t.src.slot, t.src.region, false, at);
          } else {
            record(r, t.dst.slot, t.dst.region, true, at);
            land(t, at);
          }
        }
        break;
      case StepKind::kPut:
      case StepKind::kGet:
        for (const Transfer& t : step.transfers) {
          record(t.src_rank, t.src.slot, t.src.region, false, at);
          record(t.dst_rank, t.dst.slot, t.dst.region, true, at);
          capture(t);
          land(t, at);
        }
        if (step.kind == StepKind::kPut && step.signal_id >= 0) {
          std::set<int> dsts;
          for (const Transfer& t : step.transfers) dsts.insert(t.dst_rank);
          for (int d : dsts) raises_[{d, step.signal_id}].push_back(state_[r][at.index].end);
        }
        break;
      case StepKind::kSignal:
        raises_[{step.signal_rank, step.signal_id}].push_back(state_[r][at.index].end);
        break;
      case StepKind::kCompute:
        apply_compute(at, step.compute);
        break;
      case StepKind::kMerge:
        apply_merge(at, step);
        break;
      case StepKind::kFinalize:
        apply_finalize(at, step);
        break;
      case StepKind::kWait:
      case StepKind::kBarrier:
        break;
    }
  }

  void land(const Transfer& t, StepRef at) {
    auto it = captured_.find(t.id);
    if (it == captured_.end()) return;
    const int64_t cells = t.src.region.row_count * t.src.region.head_count;
    if (captured_covered_[t.id] != cells) {
      error(str(where(at), ": transfer ", t.id, " sends ", slot_name(t.src_rank, t.src.slot), " ",
                t.src.region.to_string(), " of rank ", t.src_rank, " which holds no data in ",
                cells - captured_covered_[t.id], " of its cells when the transfer runs"));
    }
    std::vector<Rect> moved;
    for (const Rect& p : it->second) {
      Content c = p.content;
      c.writer = at;
      moved.push_back({translate(p.region, t.src.region, t.dst.region), c});
    }
    content_[t.dst_rank][t.dst.slot].write(t.dst.region, moved);
    captured_.erase(it);
  }

  void apply_compute(StepRef at, const ComputeSpec& c) {
    const int r = at.rank;
    record(r, c.q.ref.slot, c.q.ref.region, false, at);
    for (const AttnOperand& kv : c.kv) record(r, kv.ref.slot, kv.ref.region, false, at);
    if (c.accumulate) record(r, c.state.slot, c.state.region, false, at);
    record(r, c.state.slot, c.state.region, true, at);

    expect_content(read_content(r, c.q.ref, at, "q operand"), c.q.ref.region, c.q.positions,
                   c.q.first_head, at, "q operand");
    std::vector<const TokenRun*> runs;
    for (const AttnOperand& kv : c.kv) {
      expect_content(read_content(r, kv.ref, at, "kv operand"), kv.ref.region, kv.positions,
                     kv.first_head, at, "kv operand");
      if (kv.positions.count > 0) runs.push_back(&kv.positions);
    }
    std::vector<Rect> next;
    if (c.accumulate) {
      std::vector<Rect> old = read_content(r, c.state, at, "accumulated state");
      if (!expect_content(old, c.state.region, c.q.positions, c.q.first_head, at,
                          "accumulated state")) {
        return;
      }
      for (const Rect& p : old) {
        if (!p.content.contrib) {
          error(str(where(at), ": accumulates into ", slot_name(r, c.state.slot), " ",
                    p.region.to_string(), " which holds no partial state"));
          return;
        }
        Content n = p.content;
        n.contrib = add_atoms(p.content.contrib, runs);
        n.final = false;
        n.writer = at;
        next.push_back({p.region, n});
      }
    } else {
      Content n{c.q.positions, c.q.first_head, add_atoms(nullptr, runs), false, at};
      next.push_back({c.state.region, n});
    }
    content_[r][c.state.slot].write(c.state.region, next);
  }

  void apply_merge(StepRef at, const Step& step) {
    const int r = at.rank;
    record(r, step.src.slot, step.src.region, false, at);
    if (!step.overwrite) record(r, step.dst.slot, step.dst.region, false, at);
    record(r, step.dst.slot, step.dst.region, true, at);
    std::vector<Rect> src = read_content(r, step.src, at, "merge source");
    if (step.overwrite) {
      std::vector<Rect> moved;
      for (const Rect& p : src) {
        if (!p.content.contrib) {
          error(str(where(at), ": copies ", p.region.to_string(), " which is not a partial state"));
          return;
        }
        Content c = p.content;
        c.writer = at;
        moved.push_back({translate(p.region, step.src.region, step.dst.region), c});
      }
      content_[r][step.dst.slot].write(step.dst.region, moved);
      return;
    }
    std::vector<Rect> merged;
    for (const Rect& s : src) {
      const Region in_dst = translate(s.region, step.src.region, step.dst.region);
      int64_t covered = 0;
      std::vector<Rect> dst = content_[r][step.dst.slot].read(in_dst, &covered);
      if (covered != in_dst.row_count * in_dst.head_count) {
        error(str(where(at), ": merges into ", slot_name(r, step.dst.slot), " ", in_dst.to_string(),
                  " which holds no partial state yet"));
        return;
      }
      for (const Rect& d : dst) {
        const Region d_in_src = translate(d.region, step.dst.region, step.src.region);
        const Content sc = rebase(s.content, s.region, d_in_src);
        if (!sc.tokens.same_positions(d.content.tokens) || sc.first_head != d.content.first_head ||
            !sc.contrib || !d.content.contrib) {
          error(str(where(at), ": merges tokens ", sc.tokens.to_string(), " heads from ",
                    sc.first_head, " into tokens ", d.content.tokens.to_string(), " heads from ",
                    d.content.first_head,
                    sc.contrib && d.content.contrib ? "" : " (not both partial states)"));
          return;
        }
        auto sum = std::make_shared<std::vector<int16_t>>(*d.content.contrib);
        for (size_t a = 0; a < sum->size(); ++a) (*sum)[a] += (*sc.contrib)[a];
        Content n = d.content;
        n.contrib = sum;
        n.writer = at;
        merged.push_back({d.region, n});
      }
    }
    content_[r][step.dst.slot].write(step.dst.region, merged);
  }

  void apply_finalize(StepRef at, const Step& step) {
    const int r = at.rank;
    record(r, step.src.slot, step.src.region, false, at);
    record(r, step.dst.slot, step.dst.region, true, at);
    std::vector<Rect> src = read_content(r, step.src, at, "finalize source");
    std::vector<Rect> out;
    for (const Rect& p : src) {
      if (!p.content.contrib) {
        error(
            str(where(at), ": finalizes ", p.region.to_string(), " which is not a partial state"));
        continue;
      }
      check_complete(at, p.content);
      Content n = p.content;
      n.final = true;
      n.writer = at;
      out.push_back({translate(p.region, step.src.region, step.dst.region), n});
    }
    content_[r][step.dst.slot].write(step.dst.region, out);
  }

  // Every kv atom the mask needs for these rows was folded in exactly once.
  void check_complete(StepRef at, const Content& c) {
    std::vector<int> qatoms;
    for (int64_t i = 0; i < c.tokens.count; ++i) qatoms.push_back(atom_of_[size_t(c.tokens.at(i))]);
    std::sort(qatoms.begin(), qatoms.end());
    qatoms.erase(std::unique(qatoms.begin(), qatoms.end()), qatoms.end());
    for (int qa : qatoms) {
      for (int ka = 0; ka < int(atoms_.size()); ++ka) {
        if (!needed(qa, ka)) continue;
        const int n = (*c.contrib)[ka];
        if (n != 1) {
          error(str(where(at), ": rows of q ", atom_text(qa), " heads from ", c.first_head,
                    n == 0 ? " lack kv " : " hold kv ", atom_text(ka),
                    n == 0 ? "" : str(" ", n, " times"), " when finalized"));
          return;
        }
      }
    }
  }

  // ---- 4. outputs and the end of each rank ---------------------------------------------
  void check_outputs() {
    if (deadlocked_) return;
    const AttentionShape& s = plan_.shape;
    std::vector<Clock> rank_end(P_);
    for (int r = 0; r < P_; ++r) {
      rank_end[r] = input_clock_[r];
      for (const StepState& st : state_[r]) join_into(rank_end[r], st.end);
    }
    for (const RemoteAccess& a : remote_) {
      const StepState& st = state_[a.by.rank][a.by.index];
      if (!leq(st.end, rank_end[a.rank])) {
        error(str(where(a.by), (a.write ? " writes " : " reads "), slot_name(a.rank, a.slot), " ",
                  a.region.to_string(), " of rank ", a.rank, " but rank ", a.rank,
                  " can finish before that (add a wait or barrier on rank ", a.rank, ")"));
      }
    }
    for (int r = 0; r < P_; ++r) {
      std::vector<int64_t> tokens;
      for (const TokenRun& run : owned_[r]) {
        for (int64_t i = 0; i < run.count; ++i) tokens.push_back(run.at(i));
      }
      check_output(r, bound_[r].at(SlotBinding::kOutput), tokens);
      if (s.joint_tokens > 0) {
        std::vector<int64_t> joint(size_t(s.joint_tokens));
        for (int64_t t = 0; t < s.joint_tokens; ++t) joint[size_t(t)] = t;
        check_output(r, bound_[r].at(SlotBinding::kJointOutput), joint);
      }
    }
  }

  void check_output(int r, int slot, const std::vector<int64_t>& tokens) {
    const SlotDesc& desc = plan_.ranks[r].slots[slot];
    const Region all{0, desc.rows, 0, desc.heads};
    int64_t covered = 0;
    std::vector<Rect> pieces = content_[r][slot].read(all, &covered);
    if (covered != desc.rows * desc.heads) {
      error(str("rank ", r, " output ", slot_name(r, slot), " is missing ",
                desc.rows * desc.heads - covered, " of its ", desc.rows * desc.heads,
                " (row, head) cells at the end of the plan: no step writes them there"));
      return;
    }
    for (const Rect& p : pieces) {
      bool right = p.content.final && p.content.first_head == p.region.head_begin;
      for (int64_t i = 0; right && i < p.region.row_count; ++i) {
        right = p.content.tokens.at(i) == tokens[size_t(p.region.row_begin + i)];
      }
      if (!right) {
        error(str(
            "rank ", r, " output ", slot_name(r, slot), " ", p.region.to_string(), " ends holding ",
            p.content.final ? "finalized" : "unfinalized", " tokens ", p.content.tokens.to_string(),
            " heads from ", p.content.first_head, ": expected the finalized output of tokens ",
            TokenRun{tokens[size_t(p.region.row_begin)], 1, 1}.to_string(), "... at heads from ",
            p.region.head_begin, " (output on the wrong rank or rows); last written by ",
            p.content.writer.rank < 0 ? std::string("the caller") : where(p.content.writer)));
        return;
      }
    }
  }

  struct RemoteAccess {
    int rank;
    int slot;
    StepRef by;
    Region region;
    bool write;
  };

  const Plan& plan_;
  ValidationReport report_;
  int P_ = 0;
  int S_ = 0;
  std::vector<std::vector<TokenRun>> owned_;
  std::vector<std::map<SlotBinding, int>> bound_;
  std::map<int, std::pair<StepRef, StepRef>> partner_;  // two-sided id -> (sender, receiver)
  std::map<int, const Transfer*> transfer_of_;
  std::map<std::pair<int, int>, int> collective_of_;  // (rank, step) -> instance
  std::vector<std::vector<StepRef>> collectives_;
  std::map<std::pair<int, int>, int> raises_total_;  // (rank, signal) -> raises in the plan
  std::map<std::pair<int, int>, std::vector<Clock>> raises_;
  std::vector<int> atom_of_;
  std::vector<AtomInfo> atoms_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<int>> run_atoms_;
  std::vector<std::vector<StepState>> state_;
  std::vector<std::vector<std::vector<int>>> stream_steps_;
  std::vector<std::vector<size_t>> stream_pos_;
  std::vector<std::vector<SlotContent>> content_;
  std::vector<std::vector<SlotAccesses>> accesses_;
  std::vector<RemoteAccess> remote_;
  std::vector<Clock> input_clock_;
  std::map<int, std::vector<Rect>> captured_;
  std::map<int, int64_t> captured_covered_;
  bool deadlocked_ = false;
};

}  // namespace

ValidationReport validate_plan(const Plan& plan) {
  return Validator(plan).run();
}

void check_plan(const Plan& plan) {
  ValidationReport report = validate_plan(plan);
  if (!report.ok()) {
    throw_error(ErrorCode::kInternal, str("invalid ", plan.method, " plan: ", report.to_string()));
  }
}

}  // namespace tessera::sp
