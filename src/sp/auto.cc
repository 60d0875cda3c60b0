// `auto`: plans every method and parameter that applies to the request, times each plan with
// the sim executor on the cost model, and keeps the fastest. The explanation lists the
// candidates with their simulated time, exposed communication and bytes per rank, and why
// the infeasible ones were left out, so a person can see why the winner won.
#include <algorithm>
#include <numeric>

#include "planner_common.h"
#include "tessera/core/error.h"
#include "tessera/sp/planners.h"
#include "tessera/sp/sim.h"
#include "tessera/sp/validator.h"

namespace tessera::sp {

namespace {

struct Option {
  std::string label;
  PlanRequest request;
};

int64_t max_cross_machine_in(const Plan& plan) {
  int64_t worst = 0;
  for (int r = 0; r < plan.world_size; ++r) {
    worst = std::max(worst, bytes_received(plan, r, LinkClass::kNetwork) +
                                bytes_received(plan, r, LinkClass::kEmulatedNetwork));
  }
  return worst;
}

std::string megabytes(int64_t bytes) {
  return str(double(bytes) / 1e6, " MB");
}

}  // namespace

AutoChoice plan_auto(const PlanRequest& request, const CostModel& model) {
  const AttentionShape shape = request.shape();
  model.validate();
  const Topology& topo = request.topology;
  const int P = topo.world_size;
  const int N = detail::num_machines(topo);
  const int M = detail::gpus_per_machine(topo);

  std::vector<Option> options;
  auto add = [&](Method method, CommMode comm, int pu, const std::string& label) {
    Option o{label, request};
    o.request.options.method = method;
    o.request.options.comm = comm;
    o.request.options.ulysses_degree = pu;
    o.request.options.mesh_rows = 0;
    o.request.options.mesh_cols = 0;
    options.push_back(std::move(o));
  };
  for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
    const char* c = comm == CommMode::kTwoSided ? "two-sided" : "one-sided";
    add(Method::kRing, comm, 0, str("ring ", c));
    add(Method::kUlysses, comm, 0, str("ulysses ", c));
    add(Method::kTas, comm, 0, str("tas Pu=gcd(P,H) ", c));
    add(Method::kTorus, comm, 0, str("torus Pu=gcd(P,H) ", c));
  }
  // USP at every Ulysses degree between 1 and P (exclusive): the intra-machine default and
  // the others, since the best split depends on the link speeds.
  for (int pu = 2; pu < P; ++pu) {
    if (P % pu == 0) add(Method::kUsp, CommMode::kTwoSided, pu, str("usp Pu=", pu, " two-sided"));
  }
  add(Method::kMesh, CommMode::kTwoSided, 0, "mesh (tile search) two-sided");

  AutoChoice choice;
  std::vector<std::pair<double, Plan>> plans;
  for (Option& o : options) {
    AutoCandidate cand;
    cand.label = o.label;
    try {
      Plan plan = make_plan(o.request, model);
      const SimResult sim = simulate(plan, model);
      cand.feasible = true;
      cand.sim_us = sim.total_us;
      cand.exposed_us = sim.exposed_us();
      cand.max_bytes_in = *std::max_element(sim.bytes_in.begin(), sim.bytes_in.end());
      cand.cross_machine_bytes_in = max_cross_machine_in(plan);
      std::string params;
      for (const auto& [k, v] : plan.params) params += str(" ", k, "=", v);
      cand.label = str(o.label, " [", token_layout_name(plan.layout), params, "]");
      plans.emplace_back(sim.total_us, std::move(plan));
    } catch (const Error& e) {
      cand.feasible = false;
      cand.reason = e.what();
    }
    choice.candidates.push_back(std::move(cand));
  }
  TESSERA_CHECK(!plans.empty(), ErrorCode::kUnsupported, "auto: no method can plan ",
                shape.to_string(), " on ", P, " ranks");
  std::stable_sort(choice.candidates.begin(), choice.candidates.end(),
                   [](const AutoCandidate& a, const AutoCandidate& b) {
                     if (a.feasible != b.feasible) return a.feasible;
                     return a.feasible && a.sim_us < b.sim_us;
                   });
  size_t best = 0;
  for (size_t i = 1; i < plans.size(); ++i) {
    if (plans[i].first < plans[best].first) best = i;
  }
  choice.plan = std::move(plans[best].second);
  check_plan(choice.plan);

  const AutoCandidate& win = choice.candidates[0];
  std::string why =
      str("auto picked ", win.label, " for ", shape.to_string(), " on ", P, " ranks (", N,
          " machine", N == 1 ? "" : "s", M ? str(" x ", M) : std::string(" (irregular)"),
          "): simulated ", win.sim_us, " us, ", win.exposed_us, " us of it not hidden by compute");
  if (choice.candidates.size() > 1 && choice.candidates[1].feasible) {
    const AutoCandidate& next = choice.candidates[1];
    why += str("; next best ", next.label, " at ", next.sim_us, " us (",
               100.0 * (next.sim_us - win.sim_us) / std::max(win.sim_us, 1e-9), "% slower)");
  }
  why += "\ncandidates (simulated us | exposed us | max in | max cross-machine in):";
  for (const AutoCandidate& c : choice.candidates) {
    if (c.feasible) {
      why += str("\n  ", c.label, ": ", c.sim_us, " | ", c.exposed_us, " | ",
                 megabytes(c.max_bytes_in), " | ", megabytes(c.cross_machine_bytes_in));
    } else {
      why += str("\n  ", c.label, ": not applicable: ", c.reason);
    }
  }
  why += str("\ncost model: ", model.describe());
  choice.explanation = why;
  choice.plan.notes.push_back(why);
  return choice;
}

}  // namespace tessera::sp
