// The sim executor (see sim.h): a discrete-event simulation of a plan on a CostModel.
// Events are processed in time order; a step starts at the time its last prerequisite ended
// (the previous step of its stream and its deps), and ends when the cost model and the
// communication semantics say so.
#include "tessera/sp/sim.h"

#include <algorithm>
#include <array>
#include <map>
#include <queue>
#include <set>

#include "executor_fusion.h"
#include "executor_schedule.h"
#include "json_writer.h"
#include "sim_network.h"
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
  int pending = 0;         // transfers not yet landed (sendrecv)
  double data_done = 0.0;  // latest landing among its transfers
  // A running attention launch: its work at full speed not done by `since`, and how much
  // longer than that it takes at the current interference (see CostModel's slowdowns).
  double work_left = 0.0;
  double since = 0.0;
  double slowdown = 1.0;
  int64_t version = 0;  // its end events before the last change of speed are stale
};

// The members of one all-to-all, once all have arrived: it ends when its last flow lands.
struct CollectiveSim {
  std::vector<StepRef> members;
  int pending = 0;
  double data_done = 0.0;
};

// Who is waiting for a flow of the network.
struct FlowOwner {
  enum Kind { kOneSided, kSendRecv, kAllToAll } kind;
  StepRef step;    // one-sided: the step; sendrecv: one end
  StepRef other;   // sendrecv: the other end
  int index = -1;  // one-sided: the transfer's index in its step; all-to-all: the collective
  double latency_us = 0.0;
};

struct Event {
  enum Kind { kStepEnd, kTransferLanded, kNetwork } kind;
  double time;
  int64_t seq;
  StepRef step;         // kStepEnd: the step that ends; kTransferLanded: the one-sided step
  int transfer = -1;    // kTransferLanded: the index of its transfer that landed
  int64_t version = 0;  // kNetwork: valid while the network has not changed since
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
    add_ports();
    two_sided_in_flight_.assign(P, 0);
    copies_in_flight_.assign(P, 0);
    running_compute_.assign(P, {});
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
      switch (e.kind) {
        case Event::kStepEnd:
          if (e.version == steps_[e.step.rank][e.step.index].version) end_step(e.step, e.time);
          break;
        case Event::kTransferLanded:
          launch_one_sided(e.step, e.transfer + 1, e.time);
          break;
        case Event::kNetwork:
          if (e.version == network_version_) flows_finished(e.time);
          break;
      }
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

  void schedule_end(StepRef s, double time) { events_.push({Event::kStepEnd, time, seq_++, s}); }

  // Ports of the fluid network: every rank's egress and ingress per link class, at the link's
  // bandwidth, and its sockets (egress, ingress), which two-sided traffic between emulated
  // machines also crosses.
  void add_ports() {
    const int P = plan_.world_size;
    link_port_.assign(size_t(P), {});
    socket_port_.assign(size_t(P), {});
    for (int r = 0; r < P; ++r) {
      for (int cls = 0; cls < kNumLinkClasses; ++cls) {
        const double rate = model_.link(LinkClass(cls)).bandwidth_gbps * 1e3;
        link_port_[size_t(r)][size_t(cls)] = {net_.add_port(rate), net_.add_port(rate)};
      }
      const double sockets = model_.emulated_two_sided.bandwidth_gbps * 1e3;
      socket_port_[size_t(r)] = {net_.add_port(sockets), net_.add_port(sockets)};
    }
  }

  // Moves transfer t from `now` for `owner`; its landing is handled by landed().
  void launch(const Transfer& t, double now, CommMode comm, FlowOwner owner) {
    const LinkCost c = model_.link(t.link, comm);
    owner.latency_us = c.latency_us;
    if (t.bytes <= 0) {
      landed(owner, now + c.latency_us);
      return;
    }
    const auto& out = link_port_[size_t(t.src_rank)][size_t(t.link)];
    const auto& in = link_port_[size_t(t.dst_rank)][size_t(t.link)];
    std::vector<int> ports{out.first, in.second};
    if (t.link == LinkClass::kEmulatedNetwork && comm == CommMode::kTwoSided) {
      ports.push_back(socket_port_[size_t(t.src_rank)].first);
      ports.push_back(socket_port_[size_t(t.dst_rank)].second);
    }
    owners_.push_back(owner);
    net_.start(now, ports, c.bandwidth_gbps * 1e3, double(t.bytes), int64_t(owners_.size()) - 1);
    network_changed();
  }

  // The network's flows or rates changed: its next finish is the one to wait for.
  void network_changed() {
    ++network_version_;
    if (!net_.idle()) {
      events_.push({Event::kNetwork, net_.next_finish(), seq_++, {}, -1, network_version_});
    }
  }

  void flows_finished(double now) {
    const std::vector<int64_t> tags = net_.finish_until(now);
    network_changed();
    for (int64_t tag : tags) {
      const FlowOwner owner = owners_[size_t(tag)];
      landed(owner, now + owner.latency_us);
    }
  }

  // A transfer's data is at its destination at `time`.
  void landed(const FlowOwner& owner, double time) {
    switch (owner.kind) {
      case FlowOwner::kOneSided:
        events_.push({Event::kTransferLanded, time, seq_++, owner.step, owner.index});
        break;
      case FlowOwner::kSendRecv: {
        const bool one_step =
            owner.other.rank == owner.step.rank && owner.other.index == owner.step.index;
        for (StepRef x : {owner.step, owner.other}) {
          StepSim& xs = steps_[x.rank][x.index];
          xs.data_done = std::max(xs.data_done, time);
          if (--xs.pending == 0) {
            schedule_end(x, std::max(xs.data_done, xs.start) + model_.two_sided_step_us);
          }
          if (one_step) break;
        }
        break;
      }
      case FlowOwner::kAllToAll: {
        CollectiveSim& c = collectives_[size_t(owner.index)];
        c.data_done = std::max(c.data_done, time);
        if (--c.pending == 0) {
          for (const StepRef& m : c.members)
            schedule_end(m, c.data_done + model_.two_sided_step_us);
        }
        break;
      }
    }
  }

  // A one-sided step moves its transfers one after another in plan order, as the executor
  // issues them on the step's stream: each starts when the one before has landed.
  void launch_one_sided(StepRef s, int index, double now) {
    const Step& step = step_of(s);
    if (index == int(step.transfers.size())) {
      schedule_end(s, now + model_.one_sided_step_us);
      return;
    }
    launch(step.transfers[size_t(index)], now, CommMode::kOneSided,
           {FlowOwner::kOneSided, s, {}, index});
  }

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
      case StepKind::kCompute:
        return compute_launch_us(r, index, s);
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

  // A one-sided step that moves data inside the machine (copy engines beside the attention).
  static bool copies_inside_machine(const Step& step) {
    if (!is_one_sided_step(step.kind)) return false;
    return std::any_of(step.transfers.begin(), step.transfers.end(),
                       [](const Transfer& t) { return !is_cross_machine(t.link); });
  }

  // How much longer attention takes on rank r now: NCCL kernels or copies inside the machine
  // running beside it take memory bandwidth and SMs from it.
  double slowdown(int r) const {
    double extra = 0.0;
    if (two_sided_in_flight_[r] > 0) extra = model_.two_sided_compute_slowdown;
    if (copies_in_flight_[r] > 0) extra = std::max(extra, model_.one_sided_compute_slowdown);
    return 1.0 + extra;
  }

  // Rank r's two-sided steps and copies in flight change by the deltas at `now`: its running
  // attention launches go on at the new speed.
  void interference(int r, int two_sided, int copies, double now) {
    two_sided_in_flight_[r] += two_sided;
    copies_in_flight_[r] += copies;
    const double factor = slowdown(r);
    for (int i : running_compute_[r]) {
      StepSim& st = steps_[r][i];
      if (st.slowdown == factor) continue;
      st.work_left = std::max(0.0, st.work_left - (now - st.since) / st.slowdown);
      st.since = now;
      st.slowdown = factor;
      events_.push(
          {Event::kStepEnd, now + st.work_left * factor, seq_++, {r, i}, -1, ++st.version});
    }
  }

  void start_step(StepRef s, double now) {
    const Step& step = step_of(s);
    StepSim& st = steps_[s.rank][s.index];
    st.started = true;
    st.start = now;
    switch (step.kind) {
      case StepKind::kCompute: {
        st.work_left = compute_duration(s.rank, s.index, step);
        st.since = now;
        st.slowdown = slowdown(s.rank);
        running_compute_[s.rank].insert(s.index);
        events_.push(
            {Event::kStepEnd, now + st.work_left * st.slowdown, seq_++, s, -1, st.version});
        break;
      }
      case StepKind::kMerge:
      case StepKind::kFinalize:
        schedule_end(s, now + compute_duration(s.rank, s.index, step));
        break;
      case StepKind::kSendRecv: {
        interference(s.rank, +1, 0, now);
        st.pending = int(step.transfers.size());
        for (const Transfer& t : step.transfers) {
          // Moved once both ends have started: by the later of the two.
          const StepRef other = t.src_rank == s.rank ? receivers_.at(t.id) : senders_.at(t.id);
          if (!steps_[other.rank][other.index].started) continue;
          launch(t, now, CommMode::kTwoSided, {FlowOwner::kSendRecv, s, other});
        }
        if (step.transfers.empty()) schedule_end(s, now);
        break;
      }
      case StepKind::kAllToAll:
      case StepKind::kBarrier: {
        if (step.kind == StepKind::kAllToAll) interference(s.rank, +1, 0, now);
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
        // Every pair moves at once (NCCL runs an all-to-all's pairs in parallel), sharing
        // the members' ports; all members end when the last pair has landed.
        const int c = int(collectives_.size());
        collectives_.push_back({members, 1, now});  // 1: held until every pair is launched
        for (const StepRef& m : members) {
          for (const Transfer& t : step_of(m).transfers) {
            if (t.src_rank != m.rank) continue;
            ++collectives_[size_t(c)].pending;
            launch(t, now, CommMode::kTwoSided, {FlowOwner::kAllToAll, m, {}, c});
          }
        }
        landed({FlowOwner::kAllToAll, {}, {}, c}, now);
        break;
      }
      case StepKind::kPut:
      case StepKind::kGet:
        if (copies_inside_machine(step)) interference(s.rank, 0, +1, now);
        launch_one_sided(s, 0, now);
        break;
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
    if (step.kind == StepKind::kCompute) running_compute_[s.rank].erase(s.index);
    if (step.kind == StepKind::kSendRecv || step.kind == StepKind::kAllToAll) {
      interference(s.rank, -1, 0, time);
    }
    if (copies_inside_machine(step)) interference(s.rank, 0, -1, time);
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
  detail::FluidNetwork net_;
  int64_t network_version_ = 0;
  std::vector<std::array<std::pair<int, int>, kNumLinkClasses>> link_port_;  // (egress, ingress)
  std::vector<std::pair<int, int>> socket_port_;
  std::vector<FlowOwner> owners_;
  std::vector<CollectiveSim> collectives_;
  std::vector<int> two_sided_in_flight_;
  std::vector<int> copies_in_flight_;  // one-sided steps moving data inside the machine
  std::vector<std::set<int>> running_compute_;
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
