// PlanBuilder: what every planner uses to write a Plan. It creates the bound slots of every
// rank, hands out transfer ids and signals, and derives local dependencies: a step appended
// to a rank depends on the latest earlier step of every other stream of that rank that
// touches an overlapping region in a conflicting way (read after write, write after read or
// write). A pull (kGet) also waits for the rank's latest barrier, whatever its stream.
// Planners add only the cross-rank ordering (waits, barriers) and "sync regions":
// regions a wait or barrier stands for (data a remote put lands there, or a buffer a remote
// peer will overwrite), treated as written by that step.
//
// It also emits attention calls: TileRef says where a run of tokens of a tensor lives on a
// rank, and emit_attention() turns (q tile, kv tiles, state tile) into compute steps, leaving
// out KV tiles the causal mask hides entirely, splitting query heads so each call's GQA
// mapping is the global one, and choosing forward vs accumulate by what the state already
// holds.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/comm/topology.h"
#include "tessera/sp/plan.h"

namespace tessera::sp::detail {

struct IoSlots {
  int q = -1;
  int kv = -1;
  int o = -1;
  int joint_q = -1;
  int joint_kv = -1;
  int joint_o = -1;
};

// Rows [row, row + tokens.count) of `slot` hold `tokens`; its head columns
// [slot_head, slot_head + head_count) hold global heads [first_head, ...).
struct TileRef {
  int slot = -1;
  int64_t row = 0;
  TokenRun tokens;
  int slot_head = 0;
  int first_head = 0;
  int head_count = 0;

  // The slot region of the global heads [h0, h0 + n) of this tile.
  SlotRef heads(int h0, int n) const;
  SlotRef all() const { return heads(first_head, head_count); }
  // The same tile restricted to global heads [h0, h0 + n).
  TileRef with_heads(int h0, int n) const;
};

// A head range [begin, end).
struct HeadRange {
  int begin = 0;
  int end = 0;
  int count() const { return end - begin; }
};
// Query heads of head group `index` of `groups` (shard_begin/shard_size over heads).
HeadRange query_head_group(int heads, int groups, int index);
// The kv heads the query heads [q.begin, q.end) read under GQA group size g.
HeadRange kv_heads_for(HeadRange q, int g);

class PlanBuilder {
 public:
  PlanBuilder(std::string method, const AttentionShape& shape, const Topology& topology,
              TokenLayout layout, CommMode comm, int num_streams);

  int world() const { return plan_.world_size; }
  const AttentionShape& shape() const { return plan_.shape; }
  CommMode comm() const { return plan_.comm; }
  const IoSlots& io(int rank) const { return io_[rank]; }
  const std::vector<TokenRun>& owned(int rank) const { return owned_[rank]; }
  int64_t owned_rows(int rank) const { return run_rows(owned_[rank]); }
  LinkClass link(int a, int b) const { return plan_.links[size_t(a) * plan_.world_size + b]; }
  int machine(int rank) const { return plan_.machine_of_rank[rank]; }
  const SlotDesc& slot(int rank, int id) const { return plan_.ranks[rank].slots[id]; }
  const std::vector<Step>& rank_steps(int rank) const { return plan_.ranks[rank].steps; }
  int num_streams() const { return plan_.num_streams; }

  // Tiles of the bound inputs: rank's own image Q/KV runs (one tile per run) and the joint.
  std::vector<TileRef> input_q_tiles(int rank) const;
  std::vector<TileRef> input_kv_tiles(int rank) const;
  TileRef joint_q_tile(int rank) const;
  TileRef joint_kv_tile(int rank) const;

  int add_slot(int rank, const std::string& name, SlotKind kind, int64_t rows, int heads);
  Transfer transfer(int src_rank, const SlotRef& src, int dst_rank, const SlotRef& dst);
  int new_signal(int rank) { return plan_.ranks[rank].num_signals++; }

  // Appends `step` to `rank` with derived dependencies (see the header comment).
  int add(int rank, Step step, const std::vector<SlotRef>& sync_regions = {});

  // Attention of `q` against `kv` tiles into `state` (same tokens and heads as q), restricted
  // to query heads `heads`. Returns the number of compute steps emitted.
  int emit_attention(int rank, const TileRef& q, const std::vector<TileRef>& kv,
                     const TileRef& state, HeadRange heads, const std::string& note);
  // Merges partial state `src` into `dst` (or copies it when dst holds nothing yet).
  int emit_merge(int rank, const SlotRef& src, const SlotRef& dst, const std::string& note);
  int emit_finalize(int rank, const SlotRef& src, const SlotRef& dst, const std::string& note);
  // Marks a state region as holding a partial state (received whole from a peer).
  void mark_state(int rank, const SlotRef& ref);
  // Whether every cell of `ref` holds a partial state by now (some compute or merge wrote it).
  bool holds_state(int rank, const SlotRef& ref) const { return state_status(rank, ref) == 1; }

  void param(const std::string& key, const std::string& value) {
    plan_.params.emplace_back(key, value);
  }
  void note(const std::string& text) { plan_.notes.push_back(text); }
  Plan finish() { return std::move(plan_); }

 private:
  struct Tracked {
    Region region;
    int step;
    int stream;
  };
  struct StateRegion {
    int slot;
    Region region;
  };
  // 1: fully initialized, 0: untouched, -1: partly (a planner bug).
  int state_status(int rank, const SlotRef& ref) const;

  Plan plan_;
  std::vector<IoSlots> io_;
  std::vector<std::vector<TokenRun>> owned_;
  struct SlotTrack {
    std::vector<Tracked> reads;
    std::vector<Tracked> writes;
  };
  std::vector<std::vector<SlotTrack>> tracked_;  // [rank][slot]
  std::vector<std::vector<StateRegion>> states_;
  int next_transfer_id_ = 0;
};

// Whether the causal mask hides every (q, kv) pair of the two runs.
bool fully_masked(const TokenRun& q, const TokenRun& kv, bool causal);

}  // namespace tessera::sp::detail
