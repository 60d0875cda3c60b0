// Which compute steps of one rank's plan the executor issues together as one
// attn::accumulate launch.
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
#pragma once

#include <utility>
#include <vector>

#include "executor_schedule.h"
#include "tessera/sp/plan.h"

namespace tessera::sp::detail {

struct FusedJob {
  int first_step = -1;                      // the job takes its q, state and freshness
  std::vector<std::pair<int, int>> chunks;  // (step, index into its compute.kv), fold order
};

struct ComputeLaunch {
  std::vector<FusedJob> jobs;
  std::vector<int> steps;  // members in issue order; issued at the start of the last one
};

struct ComputeLaunches {
  std::vector<ComputeLaunch> launches;
  std::vector<int> launch_of_step;  // per step of the rank: its launch, -1 if not compute
};

// The launches of `rank`'s compute steps, issued in the order `actions` gives.
ComputeLaunches fuse_compute_steps(const RankPlan& rank,
                                   const std::vector<ScheduledAction>& actions, int max_jobs,
                                   int max_chunks);

}  // namespace tessera::sp::detail
