#include "plan_tp.h"

#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/tp/model_shapes.h"
#include "tessera/tp/planner.h"

namespace tessera::cli {

void print_tp_projection(const std::string& models, const std::vector<int64_t>& token_counts,
                         const Topology& topology, const sp::CostModel& model, bool explain,
                         std::vector<BenchRecord>& records) {
  const int machines = topology.num_machines(), ranks = topology.world_size;
  const std::string layout = str(machines, "x", ranks / machines, " simulated");
  std::printf(
      "\n# tensor parallel, tp %d (%s): GEMM alone, GEMM + NCCL collective, fused; "
      "overlap = 1 - (fused - GEMM) / (unfused - GEMM)\n",
      ranks, layout.c_str());
  std::printf("# %-22s %-8s %6s %10s %11s %10s %8s %8s  %s\n", "model layer", "op", "M", "gemm_us",
              "unfused_us", "fused_us", "speedup", "overlap", "plan");
  for (const tp::TpLayerShape& layer : tp::tp_layer_shapes(models, "--tp")) {
    for (int64_t m : token_counts) {
      tp::TpRequest request;
      request.op = layer.op;
      request.m = m;
      request.n = layer.n;
      request.k = layer.k;
      request.world_size = ranks;
      request.num_machines = machines;
      const tp::TpPlan plan = tp::plan_tp(request, topology, model);
      // The planner's estimates of its best fused candidate, also where it falls back.
      tp::TpPlan fused = plan;
      fused.fused = true;
      tp::TpEstimate e;
      e.gemm_us = plan.gemm_us;
      e.fused_us = plan.fused_us;
      e.unfused_us = plan.unfused_us;
      const double chosen_us = plan.fused ? e.fused_us : e.unfused_us;
      std::printf("  %-22s %-8s %6lld %10.1f %11.1f %10.1f %7.2fx %7.0f%%  %s\n",
                  (layer.model + " " + layer.layer).c_str(), tp::tp_op_name(layer.op),
                  static_cast<long long>(m), e.gemm_us, e.unfused_us, e.fused_us,
                  e.unfused_us / chosen_us, 100.0 * e.overlap_efficiency(),
                  tp::describe(plan).c_str());
      if (explain) std::printf("#   %s\n", plan.reason.c_str());
      const double flops = 2.0 * double(m) * double(layer.n) * double(layer.k) / ranks;
      for (bool is_fused : {true, false}) {
        BenchRecord rec;
        rec.bench = "tp-sim";
        rec.case_name = str(tp::tp_op_name(layer.op), " ", layer.model, " ", layer.layer, " tp",
                            ranks, " M", m);
        rec.impl = is_fused ? "tessera fused" : "cublaslt+nccl";
        rec.gpu = "H200 (cost model)";
        rec.num_gpus = ranks;
        rec.topology = layout;
        rec.median_us = is_fused ? e.fused_us : e.unfused_us;
        rec.tflops = flops / (rec.median_us * 1e-6) / 1e12;
        rec.ok = true;
        rec.extra["gemm_us"] = e.gemm_us;
        if (is_fused) rec.extra["overlap_efficiency"] = e.overlap_efficiency();
        rec.extra_text["plan"] = is_fused ? tp::describe(fused) : "unfused";
        records.push_back(rec);
      }
    }
  }
}

}  // namespace tessera::cli
