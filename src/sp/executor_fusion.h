// Which compute steps of one rank's plan the executor issues together as one
// attn::accumulate launch, and which finalize steps those launches absorb.
//
// Plans express attention as many small compute steps (a chunk of image queries against one
// KV chunk, the joint queries against the same chunk, the image queries against the joint
// keys, ...). Issued one by one, each is its own launch: a launch of a few hundred query
// tiles leaves most SMs idle for its last wave, a launch for the 512 joint queries fills a
// fraction of one wave, and every step that starts a state pays an init_state pass over it.
// Fusing them changes none of the plan's semantics:
//   - steps that fold into the same state from the same Q rows (the same region and
//     positions) become one job whose KV list is their chunks in schedule order (the fold is
//     sequential, as the separate launches were);
//   - independent steps (disjoint states, the same head counts) become separate jobs of one
//     launch;
//   - a step that starts its state (accumulate = false) becomes a fresh job (no init_state).
// A launch is issued at the start of its last member. A step joins the open launch of its
// stream only when that cannot delay or reorder anything the plan orders:
//   - it waits for no cross-stream event the launch's first member does not wait for (later
//     members of one stream run after the first anyway);
//   - none of its deps is a member, except members of the job it joins;
//   - the launch stays within kMaxJobsPerLaunch jobs and kMaxChunksPerLaunch chunks.
// The open launch of a stream closes at any other kind of step on that stream, and when a step
// on another stream depends on one of its members (that step must see the launch issued).
//
// Folded finalizes. A kFinalize F whose source state a launch L writes for the last time is
// done by L instead: the job writes the normalized output to F's destination
// (AccumulateJob::final_o), which saves a pass over the f32 state. That moves F's effect
// earlier, from F's place in the plan to L's end, and leaves the state's O unspecified; it
// is allowed only when no step can tell. With "before X" meaning ordered before X by the plan
// on this rank (deps and stream order, transitively):
//   - F runs on L's stream (it comes after L there, so L is issued and closed when F starts);
//   - F's source is one job's state (same slot and region), that job's steps are all before F,
//     F's destination has the job's rows and heads, and the job folds no other finalize;
//   - every other step of this rank that touches F's source state region (either plane) or
//     F's destination region is before L (any access), or after F and does not read the
//     state (it may overwrite it, or read or write the destination);
//   - no other rank puts into or gets from F's source state region or puts into F's
//     destination region; others may get F's destination only when F is its only local
//     writer (nothing stale could be read there instead).
// The executor still issues F at its own place as a no-op that waits for F's deps and records
// F's event and timing (zero length), so everything ordered after F in the plan stays so.
#pragma once

#include <utility>
#include <vector>

#include "executor_schedule.h"
#include "tessera/sp/plan.h"

namespace tessera::sp::detail {

struct FusedJob {
  int first_step = -1;                      // the job takes its q, state and freshness
  std::vector<std::pair<int, int>> chunks;  // (step, index into its compute.kv), fold order
  int finalize_step = -1;  // a kFinalize folded into the job (its dst is the final output)
};

struct ComputeLaunch {
  std::vector<FusedJob> jobs;
  std::vector<int> steps;  // members in issue order; issued at the start of the last one
};

struct ComputeLaunches {
  std::vector<ComputeLaunch> launches;
  std::vector<int> launch_of_step;  // per step of the rank: its launch, -1 if not compute
  // per step: for a kFinalize folded into a launch, that launch; -1 otherwise
  std::vector<int> finalize_folded_into;

  int num_folded_finalizes() const;
};

// The launches of `rank`'s compute steps, issued in the order `actions` gives (its schedule),
// with the finalize steps they absorb when `fold_finalizes`.
ComputeLaunches fuse_compute_steps(const Plan& plan, int rank,
                                   const std::vector<ScheduledAction>& actions, int max_jobs,
                                   int max_chunks, bool fold_finalizes = true);

}  // namespace tessera::sp::detail
