// `tessera plan --tp MODEL`: tensor-parallel projections from the cost model (tp/planner.h)
// for a model's column- and row-parallel layers on a machine layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_record.h"
#include "tessera/comm/topology.h"
#include "tessera/sp/cost_model.h"

namespace tessera::cli {

// Prints one table row per (layer, M) and appends a record per row and implementation.
void print_tp_projection(const std::string& models, const std::vector<int64_t>& token_counts,
                         const Topology& topology, const sp::CostModel& model, bool explain,
                         std::vector<BenchRecord>& records);

}  // namespace tessera::cli
