// The deadlock-free issue order of a plan (see executor_schedule.h).
#include "executor_schedule.h"

#include <map>
#include <set>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::sp::detail {

bool has_end_action(StepKind kind) {
  switch (kind) {
    case StepKind::kSendRecv:
    case StepKind::kAllToAll:
    case StepKind::kBarrier:
    case StepKind::kWait:
      return true;
    default:
      return false;
  }
}

namespace {

struct StepId {
  int rank;
  int step;
};

}  // namespace

std::vector<std::vector<ScheduledAction>> schedule_plan(const Plan& plan) {
  const int P = int(plan.ranks.size());
  const int S = plan.num_streams;
  // Streams' step lists, partners of two-sided transfers, collective instances.
  std::vector<std::vector<std::vector<int>>> stream_steps(P, std::vector<std::vector<int>>(S));
  std::map<int, std::vector<StepId>> partners;  // transfer id -> steps listing it
  std::map<std::pair<int, int>, int> instance_of;
  std::vector<std::vector<StepId>> instances;
  for (StepKind kind : {StepKind::kAllToAll, StepKind::kBarrier}) {
    std::map<std::pair<std::vector<int>, int>, int> index;
    for (int r = 0; r < P; ++r) {
      std::map<std::vector<int>, int> seen;
      const auto& steps = plan.ranks[r].steps;
      for (int i = 0; i < int(steps.size()); ++i) {
        if (steps[i].kind != kind) continue;
        const auto key = std::make_pair(steps[i].group, seen[steps[i].group]++);
        auto [it, fresh] = index.try_emplace(key, int(instances.size()));
        if (fresh) instances.emplace_back();
        instances[it->second].push_back({r, i});
        instance_of[{r, i}] = it->second;
      }
    }
  }
  for (int r = 0; r < P; ++r) {
    const auto& steps = plan.ranks[r].steps;
    for (int i = 0; i < int(steps.size()); ++i) {
      const Step& st = steps[i];
      TESSERA_CHECK(st.stream >= 0 && st.stream < S, ErrorCode::kInternal, "rank ", r, " step ", i,
                    " runs on stream ", st.stream, " of ", S);
      stream_steps[r][st.stream].push_back(i);
      if (st.kind == StepKind::kSendRecv || st.kind == StepKind::kAllToAll) {
        for (const Transfer& t : st.transfers) partners[t.id].push_back({r, i});
      }
    }
  }

  std::vector<std::vector<char>> started(P), ended(P);
  for (int r = 0; r < P; ++r) {
    started[r].assign(plan.ranks[r].steps.size(), 0);
    ended[r].assign(plan.ranks[r].steps.size(), 0);
  }
  std::vector<std::vector<size_t>> pos(P, std::vector<size_t>(S, 0));
  std::map<std::pair<int, int>, int64_t> raises;  // (rank, signal) -> raises so far
  std::vector<std::vector<ScheduledAction>> order(P);

  auto finish = [&](int r, int i) {
    ended[r][i] = 1;
    ++pos[r][plan.ranks[r].steps[i].stream];
  };
  auto raise = [&](const Step& st) {
    if (st.kind == StepKind::kSignal) ++raises[{st.signal_rank, st.signal_id}];
    if (st.kind == StepKind::kPut && st.signal_id >= 0) {
      std::set<int> dsts;
      for (const Transfer& t : st.transfers) dsts.insert(t.dst_rank);
      for (int d : dsts) ++raises[{d, st.signal_id}];
    }
  };
  // Whether a started step's wait for other ranks is over.
  auto can_end = [&](int r, int i) {
    const Step& st = plan.ranks[r].steps[i];
    switch (st.kind) {
      case StepKind::kSendRecv:
        for (const Transfer& t : st.transfers) {
          for (const StepId& p : partners[t.id]) {
            if (!started[p.rank][p.step]) return false;
          }
        }
        return true;
      case StepKind::kAllToAll:
      case StepKind::kBarrier:
        for (const StepId& m : instances[instance_of.at({r, i})]) {
          if (!started[m.rank][m.step]) return false;
        }
        return true;
      case StepKind::kWait:
        return raises[{r, st.signal_id}] >= st.signal_value;
      default:
        return true;
    }
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      for (int s = 0; s < S; ++s) {
        while (pos[r][s] < stream_steps[r][s].size()) {
          const int i = stream_steps[r][s][pos[r][s]];
          const Step& st = plan.ranks[r].steps[i];
          if (!started[r][i]) {
            bool ready = true;
            for (int d : st.deps) ready = ready && d >= 0 && d < i && ended[r][d];
            if (!ready) break;
            started[r][i] = 1;
            order[r].push_back({i, false});
            raise(st);
            progress = true;
            if (!has_end_action(st.kind)) {
              finish(r, i);
              continue;
            }
          }
          if (!can_end(r, i)) break;
          if (st.kind == StepKind::kAllToAll || st.kind == StepKind::kBarrier) {
            // Every member ends here, together (its step is started, so it heads its stream).
            for (const StepId& m : instances[instance_of.at({r, i})]) {
              order[m.rank].push_back({m.step, true});
              finish(m.rank, m.step);
            }
          } else {
            order[r].push_back({i, true});
            finish(r, i);
          }
          progress = true;
        }
      }
    }
  }
  for (int r = 0; r < P; ++r) {
    for (int s = 0; s < S; ++s) {
      if (pos[r][s] < stream_steps[r][s].size()) {
        const int i = stream_steps[r][s][pos[r][s]];
        const Step& st = plan.ranks[r].steps[i];
        throw_error(
            ErrorCode::kInternal,
            str("plan ", plan.method, ": rank ", r, " step ", i, " (", step_kind_name(st.kind),
                ", '", st.note, "') on stream ", s, " can never ", started[r][i] ? "end" : "start",
                ": the plan deadlocks (validate it first)"));
      }
    }
  }
  return order;
}

}  // namespace tessera::sp::detail
