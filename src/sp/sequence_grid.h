// The machinery shared by the Ulysses/Ring family (ring, ulysses, usp, tas, torus).
//
// Ranks form a Pu x Pr grid. A row is a Ulysses group (U group): its Pu members exchange
// heads for tokens, so member u ends up with the image tokens of the whole row (the row's
// "super-chunk") for query head group u. A column is a Ring group: its Pr members all hold
// head group u and pass their super-chunks' KV around. Ring is Pu = 1, Ulysses Pr = 1; USP
// puts U groups inside machines and rings across, TAS the other way round.
//
// Per rank x = (u, r), with q heads hq = query_head_group(H, Pu, u) and kv heads hk:
//   ua_q, ua_kv  [super rows, |hq|] / [super rows, |hk|]: what the other U members send
//                (x's own rows stay in its input slots, so those rows of ua_* are unused)
//   state        [super rows + joint share, |hq|] partial (O, lse)
//   ua_o         [super rows, |hq|] finalized O of the other members' tokens, sent back
//   ring0/ring1  KV chunks in flight around the ring (double buffer)
// Super-chunk rows are the U members' owned tokens in member order. Joint tokens: member r
// of a ring takes the r-th shard (of Pr) of the joint queries for its head group; every image
// row attends the joint KV once (locally), and the joint output is all-gathered at the end.
#pragma once

#include <string>
#include <vector>

#include "plan_builder.h"

namespace tessera::sp::detail {

struct Grid {
  int pu = 1;
  int pr = 1;
  std::vector<std::vector<int>> rows;  // rows[r][u] = rank; row r is a U group
  std::vector<int> u_of;
  std::vector<int> r_of;

  int at(int u, int r) const { return rows[r][u]; }
  std::vector<int> u_group_sorted(int r) const;
  // Human form: "[[0 1] [2 3]]" rows of U groups.
  std::string to_string() const;
};

// `u_groups` become the rows in the given order; every rank must appear once and all groups
// must have the same size.
Grid make_grid(const std::vector<std::vector<int>>& u_groups, int world_size);

// Every member of a group of ranks, sorted (for collectives).
std::vector<int> sorted_ranks(std::vector<int> ranks);

struct RingWork {
  TileRef q;
  TileRef state;
};

class GridPlanner {
 public:
  // `comm_stream` carries the Ulysses exchanges (and everything when ring_stream equals it);
  // `ring_stream` the ring passes.
  GridPlanner(PlanBuilder& builder, const Grid& grid, int comm_stream, int ring_stream);

  const Grid& grid() const { return grid_; }
  PlanBuilder& builder() { return b_; }
  HeadRange hq(int rank) const { return hq_[grid_.u_of[rank]]; }
  HeadRange hk(int rank) const { return hk_[grid_.u_of[rank]]; }

  // Tiles, on rank x, of the image tokens of x's U member `member` for x's head group.
  std::vector<TileRef> q_tiles(int x, int member) const;
  std::vector<TileRef> kv_tiles(int x, int member) const;
  std::vector<TileRef> state_tiles(int x, int member) const;
  // Where x finalizes member's rows: its own output for its own rows, ua_o otherwise.
  std::vector<TileRef> out_tiles(int x, int member) const;
  // The part of the owner's output slot that holds head group of x (for O going back).
  std::vector<TileRef> owner_out_tiles(int x, int member) const;
  // x's share of the joint queries: q, state and output tiles (0 rows when none).
  TileRef joint_q_share(int x) const;
  TileRef joint_state(int x) const;
  TileRef joint_out_share(int x) const;
  // x's joint queries as ring work (empty when x has no share).
  std::vector<RingWork> joint_work(int x) const;
  // The ua_q and ua_kv slots of x (what remote puts of exchange_inputs write).
  std::vector<SlotRef> ua_input_regions(int x) const;

  // Sends x's own image Q (and/or KV) for their head groups to the ua slots of the U members
  // `targets[i]` (member indices) of each x = ranks[i], as one step per rank: two-sided, an
  // all-to-all over groups[i] (or, when `groups` is empty, a sendrecv of its transfers);
  // one-sided, a put (scatter-push).
  void exchange_inputs(const std::vector<int>& ranks, const std::vector<std::vector<int>>& targets,
                       const std::vector<std::vector<int>>& groups, bool one_sided,
                       const std::string& note, bool send_q = true, bool send_kv = true);
  // The reverse for finalized O: x sends out_tiles(x, m) to the owner of member m's tokens.
  void exchange_outputs(const std::vector<int>& ranks, const std::vector<std::vector<int>>& targets,
                        const std::vector<std::vector<int>>& groups, bool one_sided,
                        const std::string& note);
  // One-sided gather-pull: x reads the image Q (and/or KV) of `members` for its head group
  // from their owners' input slots into its ua slots. Returns the step index (-1: none).
  int pull_inputs(int x, const std::vector<int>& members, bool pull_q, bool pull_kv,
                  const std::string& note);

  // One ring pass over the ring of head group u: every member computes its `work` against
  // the KV chunk each member holds (`chunks[r]`, tiles on member r), passing the chunks
  // around (two-sided: to the next member; one-sided: pulled from the owner).
  void ring_pass(int u, const std::vector<std::vector<TileRef>>& chunks,
                 const std::vector<std::vector<RingWork>>& work, bool one_sided,
                 const std::string& note);

  // Computes every tile of `work` against the joint KV (locally).
  void attend_joint_kv(int x, const std::vector<RingWork>& work, const std::string& note);

  // Finalizes member m's state rows of x into out_tiles(x, m).
  void finalize_member(int x, int member, const std::string& note);
  void finalize_joint(int x, const std::string& note);
  // All-gathers every rank's joint output share to every other rank (one step per rank).
  void gather_joint_outputs(bool one_sided);

  // A barrier over `group` on rank x's comm stream, standing for `sync` regions, and
  // (when `after_all`) after every step x has issued so far on every stream.
  void barrier(int x, const std::vector<int>& group, const std::vector<SlotRef>& sync,
               bool after_all, int stream, const std::string& note);

  // Image rows of x's super-chunk: all U members' tiles of q and state.
  std::vector<RingWork> super_work(int x) const;
  std::vector<TileRef> super_kv(int x) const;

 private:
  int member_rank(int x, int member) const { return grid_.at(member, grid_.r_of[x]); }

  PlanBuilder& b_;
  Grid grid_;
  int comm_stream_;
  int ring_stream_;
  std::vector<HeadRange> hq_, hk_;                // per head group u
  std::vector<std::vector<int64_t>> member_row_;  // per rank: super row of each member
  std::vector<int64_t> super_rows_;
  std::vector<int> ua_q_, ua_kv_, ua_o_, state_;
  std::vector<int> ring_[2];
};

// The whole two-level schedule (Ulysses exchange, joint KV, ring pass, finalize, exchange
// back, joint all-gather) on `grid`, two-sided on stream 1 or one-sided with the barriers of
// StreamFusion's unified implementation (after the scatter and at the end).
void plan_ulysses_ring(PlanBuilder& builder, const Grid& grid, bool one_sided);

// The StreamFusion rank grid: U groups spread over machines first (Ulysses across machines,
// Ring inside), members sorted machine-major; Pu must divide the world size.
Grid streamfusion_grid(const Topology& topology, int pu);

}  // namespace tessera::sp::detail
