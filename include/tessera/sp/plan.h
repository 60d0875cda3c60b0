// The sequence-parallel attention plan: an intermediate representation that every planner
// (Ring, Ulysses, USP, StreamFusion TAS/Torus, Mesh) produces and every executor (cpu, cuda,
// sim) runs. It is plain data: per rank, a table of buffer slots and an ordered list of steps
// (transfers, attention blocks, merges, finalizes, signals, waits, barriers), each on a
// stream with explicit dependencies. validator.h checks a plan; to_json() prints it.
//
// The attention problem. The attended sequence is [joint tokens; image tokens]:
//   joint (text) token t in [0, J) sits at global position t and is replicated on every rank;
//   image token i in [0, L) sits at global position J + i and is owned by one rank, as
//   owned_image_tokens() says for the plan's TokenLayout.
// Q has `heads` heads, K and V have `kv_heads` (GQA: q head h reads kv head h / group_size).
// Causal masking is on global positions: q attends to kv iff kv_pos <= q_pos.
// Every rank starts with its own image Q, K, V (all heads) and the joint Q, K, V, and must end
// with O for its own image tokens (all heads) and O for all joint tokens (all heads).
//
// Slots. A slot is a buffer on one rank: rows x heads of one kind of data, laid out as
// planes (see slot_planes()): Q, K, V, O and the partial O are [B, rows, heads, D]; the
// partial lse is f32 [B, heads, rows], so a region of a partial slot is directly an
// attn::AttnState (o [B, Lq, Hq, D], lse [B, Hq, Lq]). What a slot holds changes over time
// (a ring buffer holds a different KV chunk at every step); the plan names rows and heads
// only through Regions, and every compute operand states the global token positions and
// global heads it expects there, which the validator checks against what was really moved.
// Slots bound to the caller's tensors (inputs and outputs) are views, not allocations.
//
// Steps and streams. Stream 0 runs compute (attention blocks, merges, finalizes); streams 1..
// run communication. A stream runs its steps in plan order; a step also waits for its `deps`
// (indices of earlier steps of the same rank, any stream). Cross-rank order comes only from
// the communication semantics:
//   kSendRecv  two-sided (NCCL group of sends and receives). Each transfer appears in the
//              sender's and the receiver's step with the same id, on the same stream index
//              (one communicator per stream); between one sender and receiver the transfers
//              are matched in order. The step ends when all its transfers are done.
//   kAllToAll  two-sided collective over `group`: every member runs a matching step (the
//              k-th all-to-all of that group) listing its own sends and receives.
//   kPut       one-sided: this rank writes its region into the peer's slot. With signal_id
//              >= 0, when the step's data has landed, signal `signal_id` of every destination
//              rank is raised by one.
//   kGet       one-sided: this rank reads the peer's region into its own slot.
//   kSignal    raises signal `signal_id` of `signal_rank` by one (no data).
//   kWait      waits until this rank's signal `signal_id` reaches `signal_value`. A signal is
//              waited on once, for the total number of raises it gets in the plan.
//   kBarrier   all ranks of `group` arrive before any leaves (the k-th barrier of a group on
//              each member matches). One-sided data written before a barrier is visible
//              after it.
//   kCompute   attention of one Q operand against one or more KV operands into an fp32
//              (O, lse) state region: forward (accumulate = false) or accumulate.
//   kMerge     dst (O, lse) state <- merge(dst, src); with `overwrite`, dst <- src (dst held
//              no state yet, e.g. every block of that row on this rank was masked).
//   kFinalize  dst O (io dtype) <- normalized src state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/comm/topology.h"
#include "tessera/core/dtype.h"

namespace tessera::sp {

// ---- Sharding: the one definition used by every planner ----------------------------------
// `n` items split into `parts` consecutive parts: part i gets n / parts items, and the first
// n % parts parts get one more.
int64_t shard_size(int64_t n, int parts, int index);
int64_t shard_begin(int64_t n, int parts, int index);

// An arithmetic progression of global token positions: start + i * stride, i in [0, count).
struct TokenRun {
  int64_t start = 0;
  int64_t stride = 1;
  int64_t count = 0;

  int64_t at(int64_t i) const { return start + i * stride; }
  int64_t last() const { return start + (count - 1) * stride; }
  // Rows [offset, offset + n) of this run.
  TokenRun sub(int64_t offset, int64_t n) const { return {start + offset * stride, stride, n}; }
  // Equal as sets of positions in order (the stride of a run of <= 1 token does not matter).
  bool same_positions(const TokenRun& other) const;
  std::string to_string() const;  // "[5:+2 x8]" = 5, 7, ..., 19
};

// How image tokens are distributed over ranks.
//   kContiguous: rank r owns shard r of the sequence (shard_begin/shard_size over P parts).
//   kStriped:    rank r owns tokens r, r + P, r + 2P, ... (Striped Attention).
//   kZigzag:     the sequence is split into 2P shards; rank r owns shards r and 2P - 1 - r.
enum class TokenLayout : uint8_t { kContiguous, kStriped, kZigzag };
const char* token_layout_name(TokenLayout layout);
TokenLayout parse_token_layout(std::string_view text, std::string_view what = "layout");

// The image tokens `rank` owns (global positions, so offset by joint_tokens), in the order of
// its local rows. Empty runs are left out.
std::vector<TokenRun> owned_image_tokens(TokenLayout layout, int64_t seq_len, int64_t joint_tokens,
                                         int world_size, int rank);
int64_t run_rows(const std::vector<TokenRun>& runs);

// ---- Shapes --------------------------------------------------------------------------------
struct AttentionShape {
  int64_t batch = 1;
  int64_t seq_len = 0;       // image tokens L (sharded)
  int64_t joint_tokens = 0;  // joint tokens J (replicated), in front of the image tokens
  int heads = 0;             // query heads H
  int kv_heads = 0;          // key/value heads (divides heads)
  int head_dim = 0;
  DType dtype = DType::kBF16;         // Q, K, V, O
  DType partial_dtype = DType::kF32;  // partial O states, also when transferred (lse: f32)
  bool causal = false;

  int group_size() const { return heads / kv_heads; }
  int64_t total_tokens() const { return joint_tokens + seq_len; }
  std::string to_string() const;
};

// The most tokens (joint + image) a shape may have: counts of visible (q, kv) pairs, up to
// tokens^2, must stay inside int64.
constexpr int64_t kMaxTokens = (int64_t(1) << 31) - 1;
// The most bytes the shape's whole-sequence Q, K, V and O may span (far beyond any machine;
// keeps every byte count and offset of a plan inside int64).
constexpr int64_t kMaxShapeBytes = int64_t(1) << 60;
// Empty when `shape` is one that plans may be made for (sizes >= 1, kv_heads dividing heads,
// seq_len >= 0, at most kMaxTokens tokens and kMaxShapeBytes bytes); otherwise what is wrong,
// naming the field, its value and what was expected.
std::string shape_error(const AttentionShape& shape);

// ---- Slots ---------------------------------------------------------------------------------
enum class SlotKind : uint8_t {
  kQ,        // planes: Q [B, rows, heads, D] (io dtype), query heads
  kKV,       // planes: K, V [B, rows, heads, D] (io dtype), kv heads
  kO,        // planes: O [B, rows, heads, D] (io dtype), query heads
  kPartial,  // planes: O [B, rows, heads, D] (partial dtype) and lse f32 [B, heads, rows]
};
const char* slot_kind_name(SlotKind kind);

enum class SlotBinding : uint8_t {
  kWorkspace,    // allocated by the executor
  kInputQ,       // the caller's Q of this rank's image tokens
  kInputKV,      // the caller's K (plane 0) and V (plane 1) of this rank's image tokens
  kOutput,       // the caller's O of this rank's image tokens
  kJointQ,       // the caller's joint Q (all joint tokens)
  kJointKV,      // the caller's joint K and V
  kJointOutput,  // the caller's joint O (all joint tokens)
};
const char* slot_binding_name(SlotBinding binding);

struct SlotDesc {
  std::string name;
  SlotKind kind = SlotKind::kQ;
  SlotBinding binding = SlotBinding::kWorkspace;
  int64_t rows = 0;
  int heads = 0;
};

// Rows [row_begin, row_begin + row_count) x heads [head_begin, head_begin + head_count) of a
// slot, every batch entry, every plane.
struct Region {
  int64_t row_begin = 0;
  int64_t row_count = 0;
  int head_begin = 0;
  int head_count = 0;

  bool empty() const { return row_count == 0 || head_count == 0; }
  bool overlaps(const Region& other) const;
  std::string to_string() const;  // "rows [0,16) heads [0,4)"
};

// One plane of a slot: [B, rows, heads, inner] elements of `dtype` from `offset_bytes`, or
// [B, heads, rows, inner] when `heads_outer` (the lse plane).
struct SlotPlane {
  const char* name;
  DType dtype;
  int64_t inner;
  int64_t offset_bytes;
  bool heads_outer = false;
};
std::vector<SlotPlane> slot_planes(const AttentionShape& shape, const SlotDesc& slot);
int64_t slot_bytes(const AttentionShape& shape, const SlotDesc& slot);
// Bytes a region spans over all planes (what a transfer of it moves).
int64_t region_bytes(const AttentionShape& shape, SlotKind kind, const Region& region);

// Where a region lies inside one plane of a slot, for a strided (3-D) copy: outer_count x
// inner_count blocks of contiguous_bytes, block (o, i) at
// offset_bytes + o * outer_stride_bytes + i * inner_stride_bytes. For [B, rows, heads, inner]
// planes outer = batch, inner = row, a block = the region's heads of one row; for the lse
// plane [B, heads, rows] inner = head, a block = the region's rows of one head.
struct RegionCopy {
  int64_t offset_bytes = 0;
  int64_t contiguous_bytes = 0;
  int64_t inner_count = 0;
  int64_t inner_stride_bytes = 0;
  int64_t outer_count = 0;
  int64_t outer_stride_bytes = 0;
};
RegionCopy region_copy(const AttentionShape& shape, const SlotDesc& slot, int plane,
                       const Region& region);

// A region of a slot of the rank that runs the step (or of `rank` in a Transfer).
struct SlotRef {
  int slot = -1;
  Region region;
};

// ---- Steps ---------------------------------------------------------------------------------
enum class CommMode : uint8_t { kTwoSided, kOneSided };
const char* comm_mode_name(CommMode mode);
CommMode parse_comm_mode(std::string_view text, std::string_view what = "comm");

struct Transfer {
  int id = -1;  // unique in the plan
  int src_rank = -1;
  SlotRef src;
  int dst_rank = -1;
  SlotRef dst;
  LinkClass link = LinkClass::kSelf;  // topology link between src_rank and dst_rank
  int64_t bytes = 0;                  // region_bytes of src (== dst)
};

// An attention operand: `ref` rows hold the tokens at `positions` (one row per position, in
// order) and its heads are the global heads [first_head, first_head + head_count) (query
// heads for Q, kv heads for KV).
struct AttnOperand {
  SlotRef ref;
  TokenRun positions;
  int first_head = 0;
};

// One call of the local attention API: Q operand against every KV operand, with the mask
// given by `causal` and the operands' positions (MaskSpec q_start/q_stride, kv_start/
// kv_stride), into the fp32 (O, lse) state at `state` (same rows and heads as q).
// Heads: q head i of the call uses kv head i / (q heads / kv heads) of each KV operand; the
// planner guarantees this agrees with the global GQA mapping.
struct ComputeSpec {
  AttnOperand q;
  std::vector<AttnOperand> kv;
  bool causal = false;
  SlotRef state;
  bool accumulate = false;  // false: the state is (re)initialized by this call
};

enum class StepKind : uint8_t {
  kSendRecv,
  kAllToAll,
  kPut,
  kGet,
  kCompute,
  kMerge,
  kFinalize,
  kSignal,
  kWait,
  kBarrier,
};
const char* step_kind_name(StepKind kind);
bool is_comm_step(StepKind kind);
// kPut or kGet: moves data through symmetric memory, one transfer after another.
bool is_one_sided_step(StepKind kind);

constexpr int kComputeStream = 0;

struct Step {
  StepKind kind = StepKind::kCompute;
  int stream = kComputeStream;
  std::vector<int> deps;  // earlier steps of this rank that must end before this one starts
  std::string note;       // what it is, for people ("ring step 2: kv of rank 5")
  std::vector<Transfer> transfers;  // kSendRecv/kAllToAll/kPut/kGet
  std::vector<int> group;           // kAllToAll/kBarrier: member ranks, ascending
  ComputeSpec compute;              // kCompute
  SlotRef src;                      // kMerge/kFinalize: input state
  SlotRef dst;                      // kMerge: state merged into; kFinalize: O written
  bool overwrite = false;           // kMerge: dst <- src instead of merging
  int signal_id = -1;               // kPut (optional), kSignal, kWait
  int signal_rank = -1;             // kSignal: rank whose signal is raised
  int64_t signal_value = 0;         // kWait: value to reach
};

struct RankPlan {
  std::vector<SlotDesc> slots;
  std::vector<Step> steps;
  int num_signals = 0;
};

struct Plan {
  std::string method;  // "ring", "ulysses", "usp", "tas", "torus", "mesh"
  CommMode comm = CommMode::kTwoSided;
  TokenLayout layout = TokenLayout::kContiguous;
  AttentionShape shape;
  int world_size = 1;
  int num_streams = 2;  // stream 0 computes, 1.. communicate
  std::vector<int> machine_of_rank;
  std::vector<LinkClass> links;  // world_size x world_size, as in the topology
  std::vector<std::pair<std::string, std::string>> params;  // method parameters ("Pu", "4")
  std::vector<std::string> notes;                           // why the planner chose them
  std::vector<RankPlan> ranks;

  std::string param(const std::string& key) const;  // "" when absent
  std::string summary() const;                      // one line: method, parameters, steps, bytes
};

// Bytes a rank receives (as destination of a transfer), in total or over one link class.
int64_t bytes_received(const Plan& plan, int rank);
int64_t bytes_received(const Plan& plan, int rank, LinkClass link);
int64_t bytes_sent(const Plan& plan, int rank);

// Slots of `rank` that other ranks read or write one-sided (put/get): an executor must place
// them in symmetric memory (for bound slots: stage the caller's tensor there).
std::vector<int> remotely_accessed_slots(const Plan& plan, int rank);
// The largest size of slot `slot` over the ranks that have it (a slot id names the same
// buffer on every rank; its rows may differ by rank): the symmetric allocation size.
int64_t max_slot_bytes(const Plan& plan, int slot);

// The whole plan as JSON (deterministic: same plan, same text).
std::string to_json(const Plan& plan);

}  // namespace tessera::sp
