// Helpers shared by the planner entry points (request.cc and the per-method files).
#pragma once

#include <vector>

#include "tessera/sp/planners.h"

namespace tessera::sp::detail {

// The request's layout, or the default for the method and mask.
TokenLayout resolve_layout(const PlanRequest& request, Method method);
int num_machines(const Topology& topology);
// Ranks per machine when every machine has the same number, else 0.
int gpus_per_machine(const Topology& topology);
// Ranks sorted by (machine, local rank).
std::vector<int> machine_major_order(const Topology& topology);
// Throws kUnsupported when a Ulysses degree of `pu` leaves a rank without query heads.
void check_head_groups(const AttentionShape& shape, int pu, const char* method);

}  // namespace tessera::sp::detail
