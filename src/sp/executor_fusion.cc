// Fusion of compute steps into multi-job accumulate launches (see executor_fusion.h).
#include "executor_fusion.h"

#include <algorithm>

namespace tessera::sp::detail {

namespace {

bool same_ref(const SlotRef& a, const SlotRef& b) {
  return a.slot == b.slot && a.region.row_begin == b.region.row_begin &&
         a.region.row_count == b.region.row_count && a.region.head_begin == b.region.head_begin &&
         a.region.head_count == b.region.head_count;
}

bool same_operand(const AttnOperand& a, const AttnOperand& b) {
  return same_ref(a.ref, b.ref) && a.first_head == b.first_head &&
         a.positions.same_positions(b.positions);
}

class Fuser {
 public:
  Fuser(const RankPlan& rank, int max_jobs, int max_chunks)
      : rank_(rank), max_jobs_(max_jobs), max_chunks_(max_chunks) {
    out_.launch_of_step.assign(rank.steps.size(), -1);
    int streams = 1;
    for (const Step& s : rank.steps) streams = std::max(streams, s.stream + 1);
    open_.assign(size_t(streams), -1);
  }

  void start(int index) {
    const Step& step = rank_.steps[size_t(index)];
    // A step that depends on a member of another stream's open launch must see it issued.
    for (int d : step.deps) {
      const int l = out_.launch_of_step[size_t(d)];
      const int s = rank_.steps[size_t(d)].stream;
      if (l >= 0 && s != step.stream && open_[size_t(s)] == l) open_[size_t(s)] = -1;
    }
    int& open = open_[size_t(step.stream)];
    if (step.kind != StepKind::kCompute) {
      open = -1;
      return;
    }
    if (open < 0 || !try_join(open, index)) {
      open = int(out_.launches.size());
      out_.launches.push_back({});
      add_job(out_.launches.back(), index);
    }
    out_.launch_of_step[size_t(index)] = open;
    out_.launches[size_t(open)].steps.push_back(index);
  }

  ComputeLaunches take() { return std::move(out_); }

 private:
  // Deps of `index` on steps of other streams.
  std::vector<int> cross_deps(int index) const {
    const Step& step = rank_.steps[size_t(index)];
    std::vector<int> out;
    for (int d : step.deps)
      if (rank_.steps[size_t(d)].stream != step.stream) out.push_back(d);
    std::sort(out.begin(), out.end());
    return out;
  }

  static int chunk_count(const ComputeLaunch& l) {
    int n = 0;
    for (const FusedJob& j : l.jobs) n += int(j.chunks.size());
    return n;
  }

  void add_job(ComputeLaunch& l, int index) {
    FusedJob job;
    job.first_step = index;
    const ComputeSpec& c = rank_.steps[size_t(index)].compute;
    for (int k = 0; k < int(c.kv.size()); ++k) job.chunks.push_back({index, k});
    l.jobs.push_back(std::move(job));
  }

  bool try_join(int launch, int index) {
    ComputeLaunch& l = out_.launches[size_t(launch)];
    const Step& step = rank_.steps[size_t(index)];
    const ComputeSpec& c = step.compute;
    // No new cross-stream waits: they would delay the members already in the launch.
    const std::vector<int> waits = cross_deps(index);
    const std::vector<int> launch_waits = cross_deps(l.steps.front());
    if (!std::includes(launch_waits.begin(), launch_waits.end(), waits.begin(), waits.end()))
      return false;
    if (chunk_count(l) + int(c.kv.size()) > max_chunks_) return false;
    // The job this step continues: same Q rows, same state, folding on.
    int same_job = -1;
    for (int j = 0; j < int(l.jobs.size()); ++j) {
      const ComputeSpec& f = rank_.steps[size_t(l.jobs[size_t(j)].first_step)].compute;
      if (c.accumulate && same_operand(f.q, c.q) && same_ref(f.state, c.state) &&
          f.causal == c.causal) {
        same_job = j;
      } else if (f.state.slot == c.state.slot && f.state.region.overlaps(c.state.region)) {
        return false;  // another job writes this state: keep the plan's order
      }
    }
    // Deps on members are fine only inside the job it continues (its fold is in order).
    for (int d : step.deps) {
      if (out_.launch_of_step[size_t(d)] != launch) continue;
      if (same_job < 0) return false;
      const FusedJob& job = l.jobs[size_t(same_job)];
      const bool in_job = std::any_of(job.chunks.begin(), job.chunks.end(),
                                      [&](const auto& ch) { return ch.first == d; }) ||
                          job.first_step == d;
      if (!in_job) return false;
    }
    if (same_job >= 0) {
      for (int k = 0; k < int(c.kv.size()); ++k)
        l.jobs[size_t(same_job)].chunks.push_back({index, k});
      return true;
    }
    // A new job: one launch shares Hq and Hkv across its jobs.
    if (int(l.jobs.size()) >= max_jobs_) return false;
    const ComputeSpec& f = rank_.steps[size_t(l.jobs.front().first_step)].compute;
    if (f.q.ref.region.head_count != c.q.ref.region.head_count) return false;
    for (const FusedJob& job : l.jobs) {
      for (const auto& [s, k] : job.chunks) {
        const int heads = rank_.steps[size_t(s)].compute.kv[size_t(k)].ref.region.head_count;
        for (const AttnOperand& b : c.kv)
          if (b.ref.region.head_count != heads) return false;
      }
    }
    add_job(l, index);
    return true;
  }

  const RankPlan& rank_;
  const int max_jobs_;
  const int max_chunks_;
  std::vector<int> open_;  // per stream: its open launch, -1 when none
  ComputeLaunches out_;
};

}  // namespace

ComputeLaunches fuse_compute_steps(const RankPlan& rank,
                                   const std::vector<ScheduledAction>& actions, int max_jobs,
                                   int max_chunks) {
  Fuser fuser(rank, max_jobs, max_chunks);
  for (const ScheduledAction& a : actions) {
    if (!a.end) fuser.start(a.step);
  }
  return fuser.take();
}

}  // namespace tessera::sp::detail
