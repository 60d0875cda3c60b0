// Fuzzes every sequence-parallel planner (ring, ulysses, usp, tas, torus, mesh, auto) with
// requests decoded from the input: a planner either refuses with tessera::Error, or returns a
// plan for the requested shape and ranks that the validator accepts and the sim executor runs.
// Anything else (another exception, a crash, UB, an invalid plan) is a finding.
#include <exception>

#include "plan_request_input.h"
#include "tessera/core/error.h"
#include "tessera/sp/sim.h"
#include "tessera/sp/validator.h"

using namespace tessera;

namespace {

void check_returned_plan(const sp::PlanRequest& request, const sp::Plan& plan) {
  const sp::AttentionShape shape = request.shape();
  if (plan.world_size != request.topology.world_size || int(plan.ranks.size()) != plan.world_size) {
    fuzz::fail(str("plan for ", plan.ranks.size(), " ranks (world_size ", plan.world_size,
                   ") from a request for ", request.topology.world_size, "\n",
                   fuzz::describe(request)));
  }
  if (plan.shape.to_string() != shape.to_string()) {
    fuzz::fail(str("plan shape ", plan.shape.to_string(), " != requested ", shape.to_string(), "\n",
                   fuzz::describe(request)));
  }
  sp::ValidationReport report;
  try {
    report = sp::validate_plan(plan);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kUnsupported) return;  // too large to check (validator.h)
    fuzz::fail(str("validate_plan threw: ", e.what(), "\n", fuzz::describe(request)));
  }
  if (!report.ok()) {
    fuzz::fail(str("the validator rejects the ", plan.method, " plan (", plan.summary(), "):\n",
                   report.to_string(8), "\n", fuzz::describe(request)));
  }
  // The sim executor runs every valid plan (auto has already timed its own). Small plans
  // only: timing a 16-rank plan costs more than making it and halves the fuzzing rate.
  if (plan.world_size > 8) return;
  try {
    (void)sp::simulate(plan, sp::CostModel::for_topology(request.topology));
  } catch (const Error& e) {
    fuzz::fail(str("the sim executor refuses a valid ", plan.method, " plan: ", e.what(), "\n",
                   fuzz::describe(request)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  sp::PlanRequest request;
  sp::Plan plan;
  try {
    request = fuzz::decode_plan_request(in);
    const sp::CostModel model = fuzz::decode_cost_model(in, request.topology);
    fuzz::describe_when_asked(request, model);
    plan = sp::make_plan(request, model);
  } catch (const Error&) {
    return 0;  // refused, naming what was wrong
  } catch (const std::exception& e) {
    fuzz::fail(
        str("planning threw a non-tessera exception: ", e.what(), "\n", fuzz::describe(request)));
  }
  check_returned_plan(request, plan);
  return 0;
}
