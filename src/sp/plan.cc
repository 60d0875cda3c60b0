// Plan IR helpers: the sharding rule, token layouts, slot geometry and names.
#include "tessera/sp/plan.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::sp {

int64_t shard_size(int64_t n, int parts, int index) {
  TESSERA_CHECK_ARG(n >= 0, "n = ", n, ": expected >= 0");
  TESSERA_CHECK_ARG(parts >= 1, "parts = ", parts, ": expected >= 1");
  TESSERA_CHECK_ARG(index >= 0 && index < parts, "index = ", index, ": expected 0..", parts - 1);
  return n / parts + (index < n % parts ? 1 : 0);
}

int64_t shard_begin(int64_t n, int parts, int index) {
  TESSERA_CHECK_ARG(n >= 0, "n = ", n, ": expected >= 0");
  TESSERA_CHECK_ARG(parts >= 1, "parts = ", parts, ": expected >= 1");
  TESSERA_CHECK_ARG(index >= 0 && index <= parts, "index = ", index, ": expected 0..", parts);
  return index * (n / parts) + std::min<int64_t>(index, n % parts);
}

bool TokenRun::same_positions(const TokenRun& other) const {
  if (count != other.count) return false;
  if (count == 0) return true;
  if (start != other.start) return false;
  return count == 1 || stride == other.stride;
}

std::string TokenRun::to_string() const {
  if (count == 1) return str("[", start, "]");
  return str("[", start, ":+", stride, " x", count, "]");
}

const char* token_layout_name(TokenLayout layout) {
  switch (layout) {
    case TokenLayout::kContiguous:
      return "contiguous";
    case TokenLayout::kStriped:
      return "striped";
    case TokenLayout::kZigzag:
      return "zigzag";
  }
  return "unknown";
}

TokenLayout parse_token_layout(std::string_view text, std::string_view what) {
  if (text == "contiguous") return TokenLayout::kContiguous;
  if (text == "striped") return TokenLayout::kStriped;
  if (text == "zigzag") return TokenLayout::kZigzag;
  throw_error(ErrorCode::kInvalidArgument,
              str(what, " = '", text, "': expected contiguous, striped or zigzag"));
}

std::vector<TokenRun> owned_image_tokens(TokenLayout layout, int64_t seq_len, int64_t joint_tokens,
                                         int world_size, int rank) {
  TESSERA_CHECK_ARG(seq_len >= 0, "seq_len = ", seq_len, ": expected >= 0");
  TESSERA_CHECK_ARG(joint_tokens >= 0, "joint_tokens = ", joint_tokens, ": expected >= 0");
  TESSERA_CHECK_ARG(world_size >= 1, "world_size = ", world_size, ": expected >= 1");
  TESSERA_CHECK_ARG(rank >= 0 && rank < world_size, "rank = ", rank, ": expected 0..",
                    world_size - 1);
  std::vector<TokenRun> runs;
  auto add = [&](TokenRun run) {
    if (run.count > 0) runs.push_back(run);
  };
  switch (layout) {
    case TokenLayout::kContiguous:
      add({joint_tokens + shard_begin(seq_len, world_size, rank), 1,
           shard_size(seq_len, world_size, rank)});
      break;
    case TokenLayout::kStriped:
      // Tokens congruent to rank mod P: as many as shard_size gives (first L % P get one more).
      add({joint_tokens + rank, world_size, shard_size(seq_len, world_size, rank)});
      break;
    case TokenLayout::kZigzag: {
      const int parts = 2 * world_size;
      for (int chunk : {rank, parts - 1 - rank}) {
        add({joint_tokens + shard_begin(seq_len, parts, chunk), 1,
             shard_size(seq_len, parts, chunk)});
      }
      break;
    }
  }
  return runs;
}

int64_t run_rows(const std::vector<TokenRun>& runs) {
  int64_t rows = 0;
  for (const TokenRun& run : runs) rows += run.count;
  return rows;
}

std::string AttentionShape::to_string() const {
  return str("B", batch, " L", seq_len, joint_tokens ? str("+J", joint_tokens) : "", " H", heads,
             kv_heads != heads ? str("/kv", kv_heads) : "", " D", head_dim, " ", dtype_name(dtype),
             causal ? " causal" : "");
}

std::string shape_error(const AttentionShape& s) {
  if (s.batch < 1) return str("batch = ", s.batch, ": expected >= 1");
  if (s.seq_len < 0) return str("seq_len = ", s.seq_len, ": expected >= 0");
  if (s.joint_tokens < 0) return str("joint_tokens = ", s.joint_tokens, ": expected >= 0");
  if (s.seq_len > kMaxTokens - s.joint_tokens) {
    return str("seq_len + joint_tokens = ", s.seq_len, " + ", s.joint_tokens,
               ": expected at most 2^31 - 1 tokens");
  }
  if (s.heads < 1) return str("heads = ", s.heads, ": expected >= 1");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0) {
    return str("kv_heads = ", s.kv_heads, ": expected a divisor of heads = ", s.heads);
  }
  if (s.head_dim < 1) return str("head_dim = ", s.head_dim, ": expected >= 1");
  // [B, L + J, H + 2 Hkv, D] elements of at most 4 bytes (Q, K, V), and O as large as Q.
  int64_t bytes = 4;
  for (int64_t f : {s.batch, s.total_tokens(), 2 * int64_t(s.heads) + 2 * int64_t(s.kv_heads),
                    int64_t(s.head_dim)}) {
    if (__builtin_mul_overflow(bytes, f, &bytes) || bytes > kMaxShapeBytes) {
      return str("shape ", s.to_string(),
                 ": its Q, K, V and O would span more than 2^60 bytes: "
                 "expected a smaller batch, sequence, head count or head_dim");
    }
  }
  return "";
}

const char* slot_kind_name(SlotKind kind) {
  switch (kind) {
    case SlotKind::kQ:
      return "q";
    case SlotKind::kKV:
      return "kv";
    case SlotKind::kO:
      return "o";
    case SlotKind::kPartial:
      return "partial";
  }
  return "unknown";
}

const char* slot_binding_name(SlotBinding binding) {
  switch (binding) {
    case SlotBinding::kWorkspace:
      return "workspace";
    case SlotBinding::kInputQ:
      return "input_q";
    case SlotBinding::kInputKV:
      return "input_kv";
    case SlotBinding::kOutput:
      return "output";
    case SlotBinding::kJointQ:
      return "joint_q";
    case SlotBinding::kJointKV:
      return "joint_kv";
    case SlotBinding::kJointOutput:
      return "joint_output";
  }
  return "unknown";
}

bool Region::overlaps(const Region& o) const {
  if (empty() || o.empty()) return false;
  return row_begin < o.row_begin + o.row_count && o.row_begin < row_begin + row_count &&
         head_begin < o.head_begin + o.head_count && o.head_begin < head_begin + head_count;
}

namespace {
// "[begin,end)"; a corrupt region (the validator prints any) may have an end past int64.
std::string half_open(int64_t begin, int64_t count) {
  int64_t end = 0;
  if (__builtin_add_overflow(begin, count, &end))
    return str("[", begin, ",", begin, "+", count, ")");
  return str("[", begin, ",", end, ")");
}
}  // namespace

std::string Region::to_string() const {
  return str("rows ", half_open(row_begin, row_count), " heads ",
             half_open(head_begin, head_count));
}

std::vector<SlotPlane> slot_planes(const AttentionShape& shape, const SlotDesc& slot) {
  const int64_t per_plane_rows = shape.batch * slot.rows * slot.heads;
  std::vector<SlotPlane> planes;
  int64_t offset = 0;
  auto add = [&](const char* name, DType dtype, int64_t inner, bool heads_outer = false) {
    planes.push_back({name, dtype, inner, offset, heads_outer});
    offset += per_plane_rows * inner * int64_t(dtype_size(dtype));
  };
  switch (slot.kind) {
    case SlotKind::kQ:
      add("q", shape.dtype, shape.head_dim);
      break;
    case SlotKind::kKV:
      add("k", shape.dtype, shape.head_dim);
      add("v", shape.dtype, shape.head_dim);
      break;
    case SlotKind::kO:
      add("o", shape.dtype, shape.head_dim);
      break;
    case SlotKind::kPartial:
      add("o", shape.partial_dtype, shape.head_dim);
      add("lse", DType::kF32, 1, true);  // [B, heads, rows], as attn::AttnState
      break;
  }
  return planes;
}

namespace {
// Bytes of one (batch, row, head) cell summed over the planes of `kind`.
int64_t cell_bytes(const AttentionShape& shape, SlotKind kind) {
  const int64_t io = int64_t(dtype_size(shape.dtype));
  const int64_t part = int64_t(dtype_size(shape.partial_dtype));
  switch (kind) {
    case SlotKind::kQ:
    case SlotKind::kO:
      return int64_t(shape.head_dim) * io;
    case SlotKind::kKV:
      return 2 * int64_t(shape.head_dim) * io;
    case SlotKind::kPartial:
      return int64_t(shape.head_dim) * part + int64_t(sizeof(float));
  }
  return 0;
}
}  // namespace

int64_t slot_bytes(const AttentionShape& shape, const SlotDesc& slot) {
  return shape.batch * slot.rows * slot.heads * cell_bytes(shape, slot.kind);
}

int64_t region_bytes(const AttentionShape& shape, SlotKind kind, const Region& region) {
  return shape.batch * region.row_count * region.head_count * cell_bytes(shape, kind);
}

RegionCopy region_copy(const AttentionShape& shape, const SlotDesc& slot, int plane,
                       const Region& region) {
  std::vector<SlotPlane> planes = slot_planes(shape, slot);
  TESSERA_CHECK_ARG(plane >= 0 && plane < int(planes.size()), "plane = ", plane, ": expected 0..",
                    planes.size() - 1, " for a ", slot_kind_name(slot.kind), " slot");
  TESSERA_CHECK_ARG(region.row_begin >= 0 && region.row_begin + region.row_count <= slot.rows &&
                        region.head_begin >= 0 &&
                        region.head_begin + region.head_count <= slot.heads,
                    "region = ", region.to_string(), ": expected inside slot '", slot.name, "' of ",
                    slot.rows, " rows and ", slot.heads, " heads");
  const SlotPlane& p = planes[plane];
  const int64_t cell = p.inner * int64_t(dtype_size(p.dtype));
  RegionCopy copy;
  copy.outer_count = shape.batch;
  copy.outer_stride_bytes = slot.rows * slot.heads * cell;
  if (p.heads_outer) {  // [B, heads, rows, inner]: a block is the region's rows of one head
    copy.inner_count = region.head_count;
    copy.inner_stride_bytes = slot.rows * cell;
    copy.contiguous_bytes = region.row_count * cell;
    copy.offset_bytes =
        p.offset_bytes + region.head_begin * copy.inner_stride_bytes + region.row_begin * cell;
  } else {  // [B, rows, heads, inner]: a block is the region's heads of one row
    copy.inner_count = region.row_count;
    copy.inner_stride_bytes = slot.heads * cell;
    copy.contiguous_bytes = region.head_count * cell;
    copy.offset_bytes =
        p.offset_bytes + region.row_begin * copy.inner_stride_bytes + region.head_begin * cell;
  }
  return copy;
}

const char* comm_mode_name(CommMode mode) {
  return mode == CommMode::kTwoSided ? "two-sided" : "one-sided";
}

CommMode parse_comm_mode(std::string_view text, std::string_view what) {
  if (text == "two-sided" || text == "nccl") return CommMode::kTwoSided;
  if (text == "one-sided" || text == "symmetric") return CommMode::kOneSided;
  throw_error(ErrorCode::kInvalidArgument,
              str(what, " = '", text, "': expected two-sided (nccl) or one-sided (symmetric)"));
}

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::kSendRecv:
      return "sendrecv";
    case StepKind::kAllToAll:
      return "alltoall";
    case StepKind::kPut:
      return "put";
    case StepKind::kGet:
      return "get";
    case StepKind::kCompute:
      return "compute";
    case StepKind::kMerge:
      return "merge";
    case StepKind::kFinalize:
      return "finalize";
    case StepKind::kSignal:
      return "signal";
    case StepKind::kWait:
      return "wait";
    case StepKind::kBarrier:
      return "barrier";
  }
  return "unknown";
}

bool is_comm_step(StepKind kind) {
  switch (kind) {
    case StepKind::kSendRecv:
    case StepKind::kAllToAll:
    case StepKind::kPut:
    case StepKind::kGet:
      return true;
    default:
      return false;
  }
}

bool is_one_sided_step(StepKind kind) {
  return kind == StepKind::kPut || kind == StepKind::kGet;
}

std::string Plan::param(const std::string& key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  return "";
}

int64_t bytes_received(const Plan& plan, int rank) {
  int64_t total = 0;
  for (const RankPlan& rp : plan.ranks) {
    for (const Step& step : rp.steps) {
      // A two-sided transfer is listed by both sides; count it once, on the sender's copy
      // for sendrecv/alltoall, and on the initiator's step for put/get.
      for (const Transfer& t : step.transfers) {
        if (t.dst_rank != rank) continue;
        const bool listed_by_src = &rp == &plan.ranks[t.src_rank];
        if (step.kind == StepKind::kGet || listed_by_src) total += t.bytes;
      }
    }
  }
  return total;
}

int64_t bytes_received(const Plan& plan, int rank, LinkClass link) {
  int64_t total = 0;
  for (const RankPlan& rp : plan.ranks) {
    for (const Step& step : rp.steps) {
      for (const Transfer& t : step.transfers) {
        if (t.dst_rank != rank || t.link != link) continue;
        const bool listed_by_src = &rp == &plan.ranks[t.src_rank];
        if (step.kind == StepKind::kGet || listed_by_src) total += t.bytes;
      }
    }
  }
  return total;
}

int64_t bytes_sent(const Plan& plan, int rank) {
  int64_t total = 0;
  for (const RankPlan& rp : plan.ranks) {
    for (const Step& step : rp.steps) {
      for (const Transfer& t : step.transfers) {
        if (t.src_rank != rank) continue;
        const bool listed_by_src = &rp == &plan.ranks[t.src_rank];
        if (step.kind == StepKind::kGet || listed_by_src) total += t.bytes;
      }
    }
  }
  return total;
}

std::vector<int> remotely_accessed_slots(const Plan& plan, int rank) {
  TESSERA_CHECK_ARG(rank >= 0 && rank < int(plan.ranks.size()), "rank = ", rank, ": expected 0..",
                    int(plan.ranks.size()) - 1);
  std::vector<bool> remote(plan.ranks[rank].slots.size(), false);
  for (int r = 0; r < int(plan.ranks.size()); ++r) {
    if (r == rank) continue;
    for (const Step& step : plan.ranks[r].steps) {
      if (step.kind != StepKind::kPut && step.kind != StepKind::kGet) continue;
      for (const Transfer& t : step.transfers) {
        if (step.kind == StepKind::kPut && t.dst_rank == rank) remote[t.dst.slot] = true;
        if (step.kind == StepKind::kGet && t.src_rank == rank) remote[t.src.slot] = true;
      }
    }
  }
  std::vector<int> slots;
  for (int i = 0; i < int(remote.size()); ++i) {
    if (remote[i]) slots.push_back(i);
  }
  return slots;
}

int64_t max_slot_bytes(const Plan& plan, int slot) {
  int64_t bytes = -1;
  for (const RankPlan& rp : plan.ranks) {
    if (slot >= 0 && slot < int(rp.slots.size())) {
      bytes = std::max(bytes, slot_bytes(plan.shape, rp.slots[slot]));
    }
  }
  TESSERA_CHECK_ARG(bytes >= 0, "slot = ", slot, ": no rank of the plan has it");
  return bytes;
}

std::string Plan::summary() const {
  int64_t steps = 0;
  int64_t computes = 0;
  int64_t max_recv = 0;
  for (int r = 0; r < int(ranks.size()); ++r) {
    steps += int64_t(ranks[r].steps.size());
    for (const Step& s : ranks[r].steps) computes += s.kind == StepKind::kCompute;
    max_recv = std::max(max_recv, bytes_received(*this, r));
  }
  std::string p;
  for (const auto& [k, v] : params) p += str(" ", k, "=", v);
  return str(method, " (", comm_mode_name(comm), ", ", token_layout_name(layout), ")", p, ": ",
             world_size, " ranks, ", steps, " steps (", computes,
             " attention blocks), max received per rank ", max_recv, " bytes");
}

}  // namespace tessera::sp
