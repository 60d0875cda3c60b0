// Fuzzes the plan validator: a planner's plan for a decoded request, then one to four
// structured mutations (plan_mutation.h), then validate_plan. The validator must answer with
// a report on any plan, never crash, hang, overflow or read out of bounds; a plan it accepts
// must also be one the sim executor can time (sim.h), since executors trust the validator.
#include <exception>

#include "plan_mutation.h"
#include "plan_request_input.h"
#include "tessera/core/error.h"
#include "tessera/sp/sim.h"
#include "tessera/sp/validator.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  sp::PlanRequest request;
  sp::Plan plan;
  sp::CostModel model;
  try {
    request = fuzz::decode_plan_request(in);
    // Small plans: mutations matter more than size here, and each run stays fast.
    request.options.method =
        request.options.method == sp::Method::kAuto ? sp::Method::kRing : request.options.method;
    model = sp::CostModel::for_topology(request.topology);
    fuzz::describe_when_asked(request, model);
    plan = sp::make_plan(request, model);
  } catch (const Error&) {
    return 0;
  }
  const int mutations = in.ConsumeIntegralInRange<int>(1, 4);
  for (int i = 0; i < mutations; ++i) fuzz::mutate_plan(in, plan);
  sp::ValidationReport report;
  try {
    report = sp::validate_plan(plan);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kUnsupported) return 0;  // too large to check (validator.h)
    fuzz::fail(str("validate_plan threw instead of reporting: ", e.what()));
  } catch (const std::exception& e) {
    fuzz::fail(
        str("validate_plan threw instead of reporting: ", e.what(), "\n", fuzz::describe(request)));
  }
  if (!report.ok()) return 0;
  try {
    (void)sp::simulate(plan, model);
  } catch (const Error& e) {
    fuzz::fail(str("the validator accepts a plan the sim executor refuses: ", e.what(), "\n",
                   fuzz::describe(request)));
  }
  return 0;
}
