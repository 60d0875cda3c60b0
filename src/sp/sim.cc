// The sim executor (see sim.h): a discrete-event simulation of a plan on a CostModel.
// Events are processed in time order; a step starts at the time its last prerequisite ended
// (the previous step of its stream and its deps), and ends when the cost model and the
// communication semantics say so.
#include "tessera/sp/sim.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "executor_fusion.h"
#include "executor_schedule.h"
#include "json_writer.h"
#include "tessera/attn/attention.h"
#include "tessera/core/error.h"

namespace tessera::sp {

namespace {
// Total length covered by a set of [start, end) intervals.
double union_length(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0.0, cur_start = 0.0, cur_end = -1.0;
  for (const auto& [a, b] : intervals) {
    if (a > cur_end) {
      if (cur_end > cur_start) total += cur_end - cur_start;
      cur_start = a;
      cur_end = b;
    } else {
      cur_end = std::max(cur_end, b);
    }
  }
  if (cur_end > cur_start) total += cur_end - cur_start;
  return total;
}
}  // namespace

double SimResult::hidden_comm_fraction() const {
  double comm = 0.0, exposed = 0.0;
  for (size_t r = 0; r < rank_end_us.size(); ++r) {
    comm += comm_us[r];
    exposed += rank_end_us[r] - compute_us[r];
  }
  if (comm <= 0.0) return 1.0;
  return std::clamp(1.0 - exposed / comm, 0.0, 1.0);
}

double SimResult::exposed_us() const {
  double worst = 0.0;
  for (size_t r = 0; r < rank_end_us.size(); ++r) {
    worst = std::max(worst, rank_end_us[r] - compute_us[r]);
  }
  return worst;
}

std::string SimResult::to_json() const {
  detail::JsonWriter w;
  w.begin_object().member("total_us", total_us).member("exposed_us", exposed_us());
  w.key("rank_end_us").begin_array();
  for (double v : rank_end_us) w.value(v);
  w.end_array().key("compute_us").begin_array();
  for (double v : compute_us) w.value(v);
  w.end_array().key("bytes_in").begin_array();
  for (int64_t v : bytes_in) w.value(v);
  w.end_array().key("timeline").begin_array();
  for (const SimStepTime& t : timeline) {
    w.begin_array().value(t.rank).value(t.step).value(t.start_us).value(t.end_us).end_array();
  }
  w.end_array().end_object();
  return w.str();
}

Topology synthetic_topology(int machines, int gpus_per_machine, const LinkSpec& cross) {
  TESSERA_CHECK_ARG(machines >= 1, "machines = ", machines, ": expected >= 1");
  TESSERA_CHECK_ARG(gpus_per_machine >= 1, "gpus_per_machine = ", gpus_per_machine,
                    ": expected >= 1");
  Topology t;
  t.world_size = machines * gpus_per_machine;
  t.cross_link = cross;
  for (int r = 0; r < t.world_size; ++r) {
    t.machine_of_rank.push_back(r / gpus_per_machine);
    t.local_rank.push_back(r % gpus_per_machine);
    t.host_name.push_back(str("machine", r / gpus_per_machine));
    t.device_of_rank.push_back(r % gpus_per_machine);
  }
  t.links.resize(size_t(t.world_size) * t.world_size);
  for (int a = 0; a < t.world_size; ++a) {
    for (int b = 0; b < t.world_size; ++b) {
      t.links[size_t(a) * t.world_size + b] =
          a == b ? LinkClass::kSelf
                 : (a / gpus_per_machine == b / gpus_per_machine ? LinkClass::kNVLink
                                                                 : LinkClass::kNetwork);
    }
  }
  return t;
}

namespace {

constexpr int kNumLinkClasses = 5;

struct StepRef {
  int rank;
  int index;
  bool operator<(const StepRef& o) const {
    return std::tie(rank, index) < std::tie(o.rank, o.index);
  }
};

struct StepSim {
  bool started = false;
  bool ended = false;
  double start = 0.0;
  double end = 0.0;
  int pending = 0;         // transfers not yet launched (sendrecv, alltoall)
  double data_done = 0.0;  // latest transfer completion among launched ones
};

struct Event {
  double time;
  int64_t seq;
  StepRef step;  // the step that ends
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

class Simulator {
 public:
  Simulator(const Plan& plan, const CostModel& model) : plan_(plan), model_(model) {}

  SimResult run() {
    model_.validate();
    const int P = plan_.world_size;
    const int S = plan_.num_streams;
    TESSERA_CHECK_ARG(int(plan_.ranks.size()) == P, "plan has ", plan_.ranks.size(),
                      " rank programs for world_size ", P);
    steps_.resize(P);
    streams_.assign(P, std::vector<std::vector<int>>(S));
    pos_.assign(P, std::vector<size_t>(S, 0));
    dependents_.resize(P);
    egress_.assign(P, std::vector<double>(kNumLinkClasses, 0.0));
    ingress_.assign(P, std::vector<double>(kNumLinkClasses, 0.0));
    two_sided_in_flight_.assign(P, 0);
    plan_launches();
    for (int r = 0; r < P; ++r) {
      const RankPlan& rp = plan_.ranks[r];
      steps_[r].resize(rp.steps.size());
      dependents_[r].resize(rp.steps.size());
      for (int i = 0; i < int(rp.steps.size()); ++i) {
        const Step& s = rp.steps[i];
        TESSERA_CHECK_ARG(s.stream >= 0 && s.stream < S, "rank ", r, " step ", i, ": stream ",
                          s.stream, " outside 0..", S - 1);
        streams_[r][s.stream].push_back(i);
        for (int d : s.deps) dependents_[r][d].push_back(i);
        for (const Transfer& t : s.transfers) {
          if (s.kind == StepKind::kSendRecv || s.kind == StepKind::kAllToAll) {
            (t.src_rank == r ? senders_ : receivers_)[t.id] = {r, i};
          }
        }
        if (s.kind == StepKind::kAllToAll || s.kind == StepKind::kBarrier) {
          const auto key = std::make_pair(s.group, seen_[r][std::make_pair(s.kind, s.group)]++);
          instances_[std::make_pair(s.kind, key)].push_back({r, i});
          instance_of_[{r, i}] = std::make_pair(s.kind, key);
        }
        if (s.kind == StepKind::kPut && s.signal_id >= 0) {
          std::set<int> dsts;
          for (const Transfer& t : s.transfers) dsts.insert(t.dst_rank);
          for (int d : dsts) ++raises_total_[{d, s.signal_id}];
        }
        if (s.kind == StepKind::kSignal) ++raises_total_[{s.signal_rank, s.signal_id}];
      }
    }
    for (const auto& [id, step] : senders_) {
      TESSERA_CHECK_ARG(receivers_.count(id), "simulate: two-sided transfer ", id, " of rank ",
                        step.rank, " step ", step.index, " has no receiving step");
    }
    for (const auto& [id, step] : receivers_) {
      TESSERA_CHECK_ARG(senders_.count(id), "simulate: two-sided transfer ", id, " of rank ",
                        step.rank, " step ", step.index, " has no sending step");
    }
    for (const auto& [key, members] : instances_) {
      TESSERA_CHECK_ARG(members.size() == key.second.first.size(),
                        "simulate: ", step_kind_name(key.first), " #", key.second.second,
                        " on rank ", members[0].rank, " is run by ", members.size(), " of its ",
                        key.second.first.size(), " members");
    }
    for (int r = 0; r < P; ++r) {
      for (int s = 0; s < S; ++s) try_start_head(r, s, 0.0);
    }
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      end_step(e.step, e.time);
    }
    SimResult result;
    result.rank_end_us.assign(P, 0.0);
    result.compute_us.assign(P, 0.0);
    result.bytes_in.assign(P, 0);
    result.comm_us.assign(P, 0.0);
    for (int r = 0; r < P; ++r) {
      std::vector<std::pair<double, double>> transfers;
      result.bytes_in[r] = bytes_received(plan_, r);
      for (int i = 0; i < int(steps_[r].size()); ++i) {
        const StepSim& st = steps_[r][i];
        if (!st.ended) {
          throw_error(ErrorCode::kInvalidArgument,
                      str("simulate: rank ", r, " step ", i, " (",
                          step_kind_name(plan_.ranks[r].steps[i].kind),
                          ") never completes: the plan deadlocks (validate it)"));
        }
        result.timeline.push_back({r, i, st.start, st.end});
        result.rank_end_us[r] = std::max(result.rank_end_us[r], st.end);
        if (plan_.ranks[r].steps[i].stream == kComputeStream) {
          result.compute_us[r] += st.end - st.start;
        }
        switch (plan_.ranks[r].steps[i].kind) {
          case StepKind::kSendRecv:
          case StepKind::kAllToAll:
          case StepKind::kPut:
          case StepKind::kGet:
            transfers.emplace_back(st.start, st.end);
            break;
          default:
            break;
        }
      }
      result.comm_us[r] = union_length(std::move(transfers));
      result.total_us = std::max(result.total_us, result.rank_end_us[r]);
    }
    return result;
  }

 private:
  const Step& step_of(StepRef s) const { return plan_.ranks[s.rank].steps[s.index]; }

  void schedule_end(StepRef s, double time) { events_.push({time, seq_++, s}); }

  void try_start_head(int r, int stream, double now) {
    const auto& order = streams_[r][stream];
    const size_t pos = pos_[r][stream];
    if (pos >= order.size()) return;
    const int i = order[pos];
    StepSim& st = steps_[r][i];
    if (st.started) return;
    if (pos > 0 && !steps_[r][order[pos - 1]].ended) return;
    for (int d : plan_.ranks[r].steps[i].deps) {
      if (!steps_[r][d].ended) return;
    }
    start_step({r, i}, now);
  }

  // The compute launches the executor issues (executor_fusion.h), per rank; without them
  // (a plan the schedule cannot run: the sim reports its deadlock) every step is one launch.
  void plan_launches() {
    fused_.clear();
    try {
      const auto actions = detail::schedule_plan(plan_);
      for (int r = 0; r < plan_.world_size; ++r) {
        fused_.push_back(detail::fuse_compute_steps(
            plan_, r, actions[size_t(r)], attn::kMaxJobsPerLaunch, attn::kMaxChunksPerLaunch));
      }
    } catch (const Error&) {
      fused_.clear();
    }
  }

  static detail::FusedJob single_job(int index, const Step& s) {
    detail::FusedJob job;
    job.first_step = index;
    for (int k = 0; k < int(s.compute.kv.size()); ++k) job.chunks.push_back({index, k});
    return job;
  }

  // A fused launch costs its whole time at its last member; the others take none (they are
  // consecutive on their stream, so the stream is busy for the launch either way).
  double compute_launch_us(int r, int index, const Step& s) const {
    const RankPlan& rp = plan_.ranks[size_t(r)];
    std::vector<detail::FusedJob> jobs;
    if (fused_.empty()) {
      jobs.push_back(single_job(index, s));
    } else {
      const detail::ComputeLaunches& f = fused_[size_t(r)];
      const detail::ComputeLaunch& l = f.launches[size_t(f.launch_of_step[size_t(index)])];
      if (l.steps.back() != index) return 0.0;
      jobs = l.jobs;
    }
    std::vector<AttentionJobCost> costs;
    for (const detail::FusedJob& job : jobs) {
      const ComputeSpec& c = rp.steps[size_t(job.first_step)].compute;
      AttentionJobCost cost{c.q.ref.region.head_count, c.q.positions.count, 0, 0};
      for (const auto& [step, k] : job.chunks) {
        const AttnOperand& kv = rp.steps[size_t(step)].compute.kv[size_t(k)];
        cost.kv_rows += kv.positions.count;
        cost.visible_pairs += visible_pairs(c.q.positions, kv.positions, c.causal);
      }
      costs.push_back(cost);
    }
    return model_.attention_launch_us(plan_.shape, costs);
  }

  double compute_duration(int r, int index, const Step& s) const {
    const AttentionShape& shape = plan_.shape;
    switch (s.kind) {
      case StepKind::kCompute: {
        double t = compute_launch_us(r, index, s);
        if (two_sided_in_flight_[r] > 0) t *= 1.0 + model_.two_sided_compute_slowdown;
        return t;
      }
      case StepKind::kMerge:
        return model_.state_pass_us((s.overwrite ? 2 : 3) *
                                    region_bytes(shape, SlotKind::kPartial, s.src.region));
      case StepKind::kFinalize:
        // Folded into the launch that last writes its state: that launch's epilogue writes
        // the output instead of the state (taken as the same cost), nothing is left here.
        if (!fused_.empty() && fused_[size_t(r)].finalize_folded_into[size_t(index)] >= 0)
          return 0.0;
        return model_.state_pass_us(region_bytes(shape, SlotKind::kPartial, s.src.region) +
                                    region_bytes(shape, SlotKind::kO, s.dst.region));
      default:
        return 0.0;
    }
  }

  // Moves transfer t once both ends are ready at `now`; returns when its data has landed.
  double launch(const Transfer& t, double now, CommMode comm) {
    const int cls = int(t.link);
    const LinkCost c = model_.link(t.link, comm);
    const double begin = std::max({now, egress_[t.src_rank][cls], ingress_[t.dst_rank][cls]});
    const double data_end = begin + double(t.bytes) / (c.bandwidth_gbps * 1e3);
    egress_[t.src_rank][cls] = data_end;
    ingress_[t.dst_rank][cls] = data_end;
    return data_end + c.latency_us;
  }

  void start_step(StepRef s, double now) {
    const Step& step = step_of(s);
    StepSim& st = steps_[s.rank][s.index];
    st.started = true;
    st.start = now;
    switch (step.kind) {
      case StepKind::kCompute:
      case StepKind::kMerge:
      case StepKind::kFinalize:
        schedule_end(s, now + compute_duration(s.rank, s.index, step));
        break;
      case StepKind::kSendRecv: {
        ++two_sided_in_flight_[s.rank];
        st.pending = int(step.transfers.size());
        for (const Transfer& t : step.transfers) {
          const StepRef other = t.src_rank == s.rank ? receivers_.at(t.id) : senders_.at(t.id);
          if (!steps_[other.rank][other.index].started) continue;
          const double done = launch(t, now, CommMode::kTwoSided);
          for (StepRef x : {s, other}) {
            StepSim& xs = steps_[x.rank][x.index];
            xs.data_done = std::max(xs.data_done, done);
            if (--xs.pending == 0) {
              schedule_end(x, std::max(xs.data_done, xs.start) + model_.two_sided_step_us);
            }
          }
        }
        if (step.transfers.empty()) schedule_end(s, now);
        break;
      }
      case StepKind::kAllToAll:
      case StepKind::kBarrier: {
        if (step.kind == StepKind::kAllToAll) ++two_sided_in_flight_[s.rank];
        const auto& members = instances_.at(instance_of_.at(s));
        for (const StepRef& m : members) {
          if (!steps_[m.rank][m.index].started) return;
        }
        // Everyone has arrived.
        if (step.kind == StepKind::kBarrier) {
          double worst = 0.0;
          for (const StepRef& a : members) {
            for (const StepRef& b : members) {
              worst = std::max(
                  worst,
                  model_.link(plan_.links[size_t(a.rank) * plan_.world_size + b.rank]).latency_us);
            }
          }
          for (const StepRef& m : members) schedule_end(m, now + model_.barrier_hops * worst);
          break;
        }
        // Every pair moves at once (NCCL runs an all-to-all's pairs in parallel): per link
        // class, the collective takes as long as its busiest member's egress or ingress.
        double end = now;
        for (int cls = 0; cls < kNumLinkClasses; ++cls) {
          std::map<int, int64_t> out, in;  // bytes per rank on this class
          for (const StepRef& m : members) {
            for (const Transfer& t : step_of(m).transfers) {
              if (t.src_rank != m.rank || int(t.link) != cls) continue;
              out[t.src_rank] += t.bytes;
              in[t.dst_rank] += t.bytes;
            }
          }
          if (out.empty()) continue;
          const LinkCost& c = model_.link(LinkClass(cls), CommMode::kTwoSided);
          double begin = now;
          int64_t busiest = 0;
          for (const auto& [r, bytes] : out) {
            begin = std::max(begin, egress_[r][cls]);
            busiest = std::max(busiest, bytes);
          }
          for (const auto& [r, bytes] : in) {
            begin = std::max(begin, ingress_[r][cls]);
            busiest = std::max(busiest, bytes);
          }
          const double data_end = begin + double(busiest) / (c.bandwidth_gbps * 1e3);
          for (const auto& [r, bytes] : out) egress_[r][cls] = data_end;
          for (const auto& [r, bytes] : in) ingress_[r][cls] = data_end;
          end = std::max(end, data_end + c.latency_us);
        }
        for (const StepRef& m : members) schedule_end(m, end + model_.two_sided_step_us);
        break;
      }
      case StepKind::kPut:
      case StepKind::kGet: {
        double done = now;
        for (const Transfer& t : step.transfers)
          done = std::max(done, launch(t, now, CommMode::kOneSided));
        schedule_end(s, done + model_.one_sided_step_us);
        break;
      }
      case StepKind::kSignal: {
        const LinkClass l = plan_.links[size_t(s.rank) * plan_.world_size + step.signal_rank];
        schedule_end(s, now + model_.link(l).latency_us);
        break;
      }
      case StepKind::kWait: {
        const auto key = std::make_pair(s.rank, step.signal_id);
        if (raised_[key] >= step.signal_value) {
          schedule_end(s, std::max(now, raise_time_[key]));
        } else {
          waiting_[key] = s;
        }
        break;
      }
    }
  }

  void raise(int rank, int signal, double time) {
    const auto key = std::make_pair(rank, signal);
    ++raised_[key];
    raise_time_[key] = std::max(raise_time_[key], time);
    auto it = waiting_.find(key);
    if (it != waiting_.end() && raised_[key] >= step_of(it->second).signal_value) {
      schedule_end(it->second, time);
      waiting_.erase(it);
    }
  }

  void end_step(StepRef s, double time) {
    StepSim& st = steps_[s.rank][s.index];
    if (st.ended) return;
    st.ended = true;
    st.end = time;
    const Step& step = step_of(s);
    if (step.kind == StepKind::kSendRecv || step.kind == StepKind::kAllToAll) {
      --two_sided_in_flight_[s.rank];
    }
    if (step.kind == StepKind::kPut && step.signal_id >= 0) {
      std::set<int> dsts;
      for (const Transfer& t : step.transfers) dsts.insert(t.dst_rank);
      for (int d : dsts) raise(d, step.signal_id, time);
    }
    if (step.kind == StepKind::kSignal) raise(step.signal_rank, step.signal_id, time);
    // The stream moves on; dependents may start.
    ++pos_[s.rank][step.stream];
    try_start_head(s.rank, step.stream, time);
    for (int d : dependents_[s.rank][s.index]) {
      try_start_head(s.rank, plan_.ranks[s.rank].steps[d].stream, time);
    }
  }

  using InstanceKey = std::pair<StepKind, std::pair<std::vector<int>, int>>;

  const Plan& plan_;
  const CostModel& model_;
  std::vector<std::vector<StepSim>> steps_;
  std::vector<std::vector<std::vector<int>>> streams_;
  std::vector<std::vector<size_t>> pos_;
  std::vector<std::vector<std::vector<int>>> dependents_;
  std::vector<std::vector<double>> egress_, ingress_;
  std::vector<int> two_sided_in_flight_;
  std::vector<detail::ComputeLaunches> fused_;  // per rank; empty: no fusion
  std::map<int, StepRef> senders_, receivers_;
  std::map<int, std::map<std::pair<StepKind, std::vector<int>>, int>> seen_;
  std::map<InstanceKey, std::vector<StepRef>> instances_;
  std::map<StepRef, InstanceKey> instance_of_;
  std::map<std::pair<int, int>, int> raises_total_, raised_;
  std::map<std::pair<int, int>, double> raise_time_;
  std::map<std::pair<int, int>, StepRef> waiting_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t seq_ = 0;
};

}  // namespace

SimResult simulate(const Plan& plan, const CostModel& model) {
  return Simulator(plan, model).run();
}

}  // namespace tessera::sp
