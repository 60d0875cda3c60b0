// Fusion of compute steps into multi-job accumulate launches, and the finalize steps those
// launches absorb (see executor_fusion.h).
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

// ---- folded finalizes ----------------------------------------------------------------------

// What one step does to one region of one slot of this rank.
struct Access {
  bool reads = false;
  bool writes = false;
  bool any() const { return reads || writes; }
};

bool touches(const SlotRef& ref, int slot, const Region& region) {
  return ref.slot == slot && ref.region.overlaps(region);
}

// The accesses of `step` (run by `rank`) to (slot, region), over every plane.
Access access_of(const Step& step, int rank, int slot, const Region& region) {
  Access a;
  switch (step.kind) {
    case StepKind::kCompute: {
      const ComputeSpec& c = step.compute;
      if (touches(c.q.ref, slot, region)) a.reads = true;
      for (const AttnOperand& kv : c.kv)
        if (touches(kv.ref, slot, region)) a.reads = true;
      if (touches(c.state, slot, region)) {
        a.writes = true;
        a.reads = a.reads || c.accumulate;
      }
      break;
    }
    case StepKind::kMerge:
      if (touches(step.src, slot, region)) a.reads = true;
      if (touches(step.dst, slot, region)) {
        a.writes = true;
        a.reads = a.reads || !step.overwrite;
      }
      break;
    case StepKind::kFinalize:
      if (touches(step.src, slot, region)) a.reads = true;
      if (touches(step.dst, slot, region)) a.writes = true;
      break;
    case StepKind::kSendRecv:
    case StepKind::kAllToAll:
    case StepKind::kPut:
    case StepKind::kGet:
      // This rank reads the sources it holds and writes the destinations it holds.
      for (const Transfer& t : step.transfers) {
        if (t.src_rank == rank && touches(t.src, slot, region)) a.reads = true;
        if (t.dst_rank == rank && touches(t.dst, slot, region)) a.writes = true;
      }
      break;
    case StepKind::kSignal:
    case StepKind::kWait:
    case StepKind::kBarrier:
      break;
  }
  return a;
}

// A region of this rank's memory that another rank's put writes or get reads.
struct RemoteAccess {
  SlotRef ref;
  bool writes = false;
};

std::vector<RemoteAccess> remote_accesses(const Plan& plan, int rank) {
  std::vector<RemoteAccess> out;
  for (int r = 0; r < int(plan.ranks.size()); ++r) {
    if (r == rank) continue;
    for (const Step& step : plan.ranks[size_t(r)].steps) {
      if (step.kind != StepKind::kPut && step.kind != StepKind::kGet) continue;
      for (const Transfer& t : step.transfers) {
        if (step.kind == StepKind::kPut && t.dst_rank == rank) out.push_back({t.dst, true});
        if (step.kind == StepKind::kGet && t.src_rank == rank) out.push_back({t.src, false});
      }
    }
  }
  return out;
}

// Decides which finalize steps of one rank the launches absorb (executor_fusion.h).
class FinalizeFolder {
 public:
  FinalizeFolder(const Plan& plan, int rank, const std::vector<ScheduledAction>& actions,
                 ComputeLaunches& out)
      : plan_(plan), rank_(rank), steps_(plan.ranks[size_t(rank)].steps), out_(out) {
    const int n = int(steps_.size());
    stream_prev_.assign(size_t(n), -1);
    std::vector<int> last(size_t(plan.num_streams), -1);
    for (int i = 0; i < n; ++i) {
      const int s = steps_[size_t(i)].stream;
      if (s >= 0 && s < plan.num_streams) {
        stream_prev_[size_t(i)] = last[size_t(s)];
        last[size_t(s)] = i;
      }
    }
    start_pos_.assign(size_t(n), -1);
    for (int p = 0; p < int(actions.size()); ++p)
      if (!actions[size_t(p)].end) start_pos_[size_t(actions[size_t(p)].step)] = p;
  }

  void run() {
    out_.finalize_folded_into.assign(steps_.size(), -1);
    for (int f = 0; f < int(steps_.size()); ++f) {
      if (steps_[size_t(f)].kind != StepKind::kFinalize || start_pos_[size_t(f)] < 0) continue;
      int launch = -1, job = -1;
      if (!find_writer(f, launch, job) || !safe_to_fold(f, launch, job)) continue;
      out_.launches[size_t(launch)].jobs[size_t(job)].finalize_step = f;
      out_.finalize_folded_into[size_t(f)] = launch;
    }
  }

 private:
  // The launch on F's stream issued last before F with a job whose state is F's source.
  bool find_writer(int f, int& launch, int& job) const {
    const Step& fin = steps_[size_t(f)];
    int best_pos = -1;
    for (int l = 0; l < int(out_.launches.size()); ++l) {
      const ComputeLaunch& cl = out_.launches[size_t(l)];
      const int issue = cl.steps.back();
      if (steps_[size_t(issue)].stream != fin.stream) continue;
      const int pos = start_pos_[size_t(issue)];
      if (pos < 0 || pos >= start_pos_[size_t(f)] || pos < best_pos) continue;
      for (int j = 0; j < int(cl.jobs.size()); ++j) {
        if (same_ref(steps_[size_t(cl.jobs[size_t(j)].first_step)].compute.state, fin.src)) {
          best_pos = pos;
          launch = l;
          job = j;
        }
      }
    }
    return best_pos >= 0;
  }

  // Steps ordered before any of `from` by the plan (deps and stream order, transitively),
  // `from` included. Deps and stream predecessors have smaller indices: one backward sweep.
  std::vector<char> before(const std::vector<int>& from) const {
    std::vector<char> mark(steps_.size(), 0);
    for (int i : from) mark[size_t(i)] = 1;
    for (int i = int(steps_.size()) - 1; i >= 0; --i) {
      if (!mark[size_t(i)]) continue;
      for (int d : steps_[size_t(i)].deps) mark[size_t(d)] = 1;
      if (stream_prev_[size_t(i)] >= 0) mark[size_t(stream_prev_[size_t(i)])] = 1;
    }
    return mark;
  }

  // Steps ordered after `from` by the plan, `from` included: one forward sweep.
  std::vector<char> after(int from) const {
    std::vector<char> mark(steps_.size(), 0);
    mark[size_t(from)] = 1;
    for (int i = from + 1; i < int(steps_.size()); ++i) {
      bool m = stream_prev_[size_t(i)] >= 0 && mark[size_t(stream_prev_[size_t(i)])];
      for (int d : steps_[size_t(i)].deps) m = m || mark[size_t(d)];
      mark[size_t(i)] = m ? 1 : 0;
    }
    return mark;
  }

  bool safe_to_fold(int f, int launch, int job_index) const {
    const Step& fin = steps_[size_t(f)];
    const ComputeLaunch& cl = out_.launches[size_t(launch)];
    const FusedJob& job = cl.jobs[size_t(job_index)];
    if (job.finalize_step >= 0) return false;
    const ComputeSpec& c = steps_[size_t(job.first_step)].compute;
    if (fin.dst.region.row_count != c.q.ref.region.row_count ||
        fin.dst.region.head_count != c.q.ref.region.head_count) {
      return false;
    }
    std::vector<int> job_steps{job.first_step};
    for (const auto& ch : job.chunks) job_steps.push_back(ch.first);
    const std::vector<char> before_f = before({f});
    for (int s : job_steps)
      if (!before_f[size_t(s)]) return false;

    const std::vector<char> before_l = before(cl.steps);
    const std::vector<char> after_f = after(f);
    std::vector<char> in_job(steps_.size(), 0), in_launch(steps_.size(), 0);
    for (int s : job_steps) in_job[size_t(s)] = 1;
    for (int s : cl.steps) in_launch[size_t(s)] = 1;
    bool dst_written_elsewhere = false;
    for (int i = 0; i < int(steps_.size()); ++i) {
      if (i == f || in_job[size_t(i)]) continue;
      const Step& st = steps_[size_t(i)];
      const Access src = access_of(st, rank_, fin.src.slot, fin.src.region);
      const Access dst = access_of(st, rank_, fin.dst.slot, fin.dst.region);
      if (!src.any() && !dst.any()) continue;
      dst_written_elsewhere = dst_written_elsewhere || dst.writes;
      if (in_launch[size_t(i)]) return false;          // another job of L touches them
      if (before_l[size_t(i)]) continue;               // done before L starts
      if (after_f[size_t(i)] && !src.reads) continue;  // sees L's result where it saw F's
      return false;
    }
    if (!remote_known_) {
      remote_ = remote_accesses(plan_, rank_);
      remote_known_ = true;
    }
    for (const RemoteAccess& x : remote_) {
      if (touches(x.ref, fin.src.slot, fin.src.region)) return false;
      if (touches(x.ref, fin.dst.slot, fin.dst.region) && (x.writes || dst_written_elsewhere))
        return false;
    }
    return true;
  }

  const Plan& plan_;
  const int rank_;
  const std::vector<Step>& steps_;
  ComputeLaunches& out_;
  std::vector<int> stream_prev_;  // per step: the previous step of its stream, -1 if first
  std::vector<int> start_pos_;    // per step: index of its start action in the schedule
  mutable std::vector<RemoteAccess> remote_;  // computed at the first candidate that needs it
  mutable bool remote_known_ = false;
};

}  // namespace

int ComputeLaunches::num_folded_finalizes() const {
  return int(std::count_if(finalize_folded_into.begin(), finalize_folded_into.end(),
                           [](int l) { return l >= 0; }));
}

ComputeLaunches fuse_compute_steps(const Plan& plan, int rank,
                                   const std::vector<ScheduledAction>& actions, int max_jobs,
                                   int max_chunks, bool fold_finalizes) {
  const RankPlan& rp = plan.ranks[size_t(rank)];
  Fuser fuser(rp, max_jobs, max_chunks);
  for (const ScheduledAction& a : actions) {
    if (!a.end) fuser.start(a.step);
  }
  ComputeLaunches out = fuser.take();
  if (fold_finalizes) {
    FinalizeFolder(plan, rank, actions, out).run();
  } else {
    out.finalize_folded_into.assign(rp.steps.size(), -1);
  }
  return out;
}

}  // namespace tessera::sp::detail
