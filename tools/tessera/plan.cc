// `tessera plan`: plans a sequence-parallel attention layer for every method on a machine
// layout (no GPU needed: machines x GPUs per machine, NVLink inside, the given link across),
// validates each plan and times it with the sim executor on the cost model. The times are the
// model's, not measurements; `tessera bench sp` measures. `--dump METHOD` writes that
// method's plan as JSON, `--explain` prints what `auto` compared and why it chose.
// `--tp MODEL` projects the model's tensor-parallel layers instead (plan_tp.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>

#include "bench_record.h"
#include "command.h"
#include "options.h"
#include "plan_tp.h"
#include "rank_launch.h"
#include "sp_methods.h"
#include "tessera/core/error.h"
#include "tessera/sp/sim.h"
#include "tessera/sp/validator.h"

namespace tessera::cli {
namespace {

int run_plan(const std::vector<std::string>& args, int, char**) {
  Options opt("plan",
              {{"machines", "1", "machines"},
               {"gpus-per-machine", "4", "GPUs per machine"},
               {"link", "nic400", "link between machines: nic400 (50 GB/s, 5 us) or paper"},
               {"link-gbps", "0", "link bandwidth per GPU in GB/s (overrides --link)"},
               {"link-latency-us", "-1", "link latency in us (overrides --link)"},
               {"methods", kDefaultMethods, "comma list of method[:one-sided]"},
               {"seq", "36864", "comma list of image sequence lengths L"},
               {"batch", "1", "batch B"},
               {"heads", "24", "query heads H"},
               {"kv-heads", "0", "key/value heads (0: H)"},
               {"head-dim", "128", "head dim D"},
               {"joint", "512", "replicated joint (text) tokens"},
               {"causal", "", "causal mask", true},
               {"cost", "", "cost model overrides (key=value,...)"},
               {"explain", "", "print what auto compared and why it chose", true},
               {"dump", "", "write this method's plan as JSON to plan-<method>.json"},
               {"tp", "", "tensor-parallel projections instead: llama3-70b, gpt3-175b or all"},
               {"tp-m", "128,1024,4096,16384", "comma list of token counts M for --tp"},
               {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  ContextOptions link_options;
  apply_emulation_options(1, opt.text("link"), opt.number("link-gbps"),
                          opt.number("link-latency-us"), link_options);
  const int machines = int(opt.integer("machines", 1, 4096));
  const int per_machine = int(opt.integer("gpus-per-machine", 1, 4096));
  // Plans grow with P^2 transfers: beyond a few thousand ranks a plan takes minutes.
  TESSERA_CHECK_ARG(machines * per_machine <= 4096, "--machines = ", machines,
                    ", --gpus-per-machine = ", per_machine, ": expected at most 4096 ranks in all");
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  const int64_t batch = opt.integer("batch", 1, kMaxInt);
  const int heads = int(opt.integer("heads", 1, kMaxInt));
  const int kv_heads = int(opt.integer("kv-heads", 0, heads));
  TESSERA_CHECK_ARG(kv_heads == 0 || heads % kv_heads == 0, "--kv-heads = ", kv_heads,
                    ": expected a divisor of --heads = ", heads, " (or 0 for all)");
  const int head_dim = int(opt.integer("head-dim", 1, kMaxInt));
  const int64_t joint = opt.integer("joint", 0, std::numeric_limits<int64_t>::max());
  const Topology topology = sp::synthetic_topology(machines, per_machine, link_options.emulated_link);
  sp::CostModel model = sp::CostModel::for_topology(topology);
  model.apply(opt.text("cost"));

  std::vector<BenchRecord> records;
  std::printf("# tessera plan: %dx%d (cost model; times are predictions, not measurements), "
              "link %.2f GB/s %.1f us across machines\n",
              machines, per_machine, link_options.emulated_link.bandwidth_gbps,
              link_options.emulated_link.latency_us);
  if (!opt.text("tp").empty()) {
    std::vector<int64_t> token_counts;
    for (const std::string& text : opt.list("tp-m")) {
      const int64_t m = int64_t(parse_bytes(text, "--tp-m"));  // "16K" = 16384 tokens
      TESSERA_CHECK_ARG(m >= 1, "--tp-m = '", text, "': expected >= 1 token");
      token_counts.push_back(m);
    }
    print_tp_projection(opt.text("tp"), token_counts, topology, model, opt.flag("explain"),
                        records);
    if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
    return 0;
  }
  for (const std::string& seq_text : opt.list("seq")) {
    sp::PlanRequest req;
    req.batch = batch;
    req.seq_len = int64_t(parse_bytes(seq_text, "--seq"));  // "64K" = 65536 tokens
    TESSERA_CHECK_ARG(req.seq_len >= 1, "--seq = '", seq_text, "': expected >= 1 token");
    req.heads = heads;
    req.kv_heads = kv_heads;
    req.head_dim = head_dim;
    req.causal = opt.flag("causal");
    req.joint_tokens = joint;
    req.topology = topology;
    const sp::AttentionShape shape = req.shape();
    const int64_t T = req.joint_tokens + req.seq_len;
    const double pairs = req.causal ? double(T) * double(T + 1) / 2 : double(T) * double(T);
    const double flops = 4.0 * double(req.batch) * req.heads * req.head_dim * pairs;
    (void)shape;
    std::printf("\n# L %lld, J %lld, H %d, D %d%s\n# %-18s %10s %11s %10s %10s %10s  %s\n",
                static_cast<long long>(req.seq_len), static_cast<long long>(req.joint_tokens),
                req.heads, req.head_dim, req.causal ? ", causal" : "", "method", "sim_us",
                "TFLOP/s/GPU", "hidden", "MB_intra", "MB_cross", "plan");
    for (const std::string& text : opt.list("methods")) {
      const MethodSpec spec = parse_method_spec(text);
      req.options.method = spec.method;
      req.options.comm = spec.comm;
      sp::Plan plan;
      std::string explanation;
      try {
        if (spec.method == sp::Method::kAuto) {
          sp::AutoChoice choice = sp::plan_auto(req, model);
          plan = std::move(choice.plan);
          explanation = choice.explanation;
          if (opt.flag("explain")) {
            for (const auto& c : choice.candidates)
              std::printf("#   auto candidate %-34s %s\n", c.label.c_str(),
                          c.feasible ? str(c.sim_us, " us").c_str() : c.reason.c_str());
          }
        } else {
          plan = sp::make_plan(req, model);
        }
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kUnsupported) throw;
        std::printf("  %-18s not applicable: %s\n", text.c_str(), e.what());
        continue;
      }
      sp::check_plan(plan);
      const sp::SimResult sim = sp::simulate(plan, model);
      double mb_intra = 0, mb_cross = 0;
      for (int r = 0; r < plan.world_size; ++r) {
        mb_intra = std::max(mb_intra, double(sp::bytes_received(plan, r, LinkClass::kNVLink)) / 1e6);
        mb_cross = std::max(mb_cross, double(sp::bytes_received(plan, r, LinkClass::kNetwork)) / 1e6);
      }
      std::string params = plan.method;
      for (const auto& [k, v] : plan.params) params += str(" ", k, "=", v);
      const double tflops = flops / plan.world_size / (sim.total_us * 1e-6) / 1e12;
      std::printf("  %-18s %10.1f %11.1f %9.0f%% %10.1f %10.1f  %s\n", text.c_str(), sim.total_us,
                  tflops, 100.0 * sim.hidden_comm_fraction(), mb_intra, mb_cross, params.c_str());
      if (!explanation.empty() && opt.flag("explain")) std::printf("#   %s\n", explanation.c_str());
      if (opt.text("dump") == text) {
        const std::string path = "plan-" + text + ".json";
        std::ofstream(path) << sp::to_json(plan);
        std::printf("#   plan written to %s\n", path.c_str());
      }
      BenchRecord rec;
      rec.bench = "sp-sim";
      rec.case_name = str("L", req.seq_len, " J", req.joint_tokens, " H", req.heads, " D", req.head_dim,
                          req.causal ? " causal" : "");
      rec.impl = "tessera " + text;
      rec.gpu = "H200 (cost model)";
      rec.num_gpus = plan.world_size;
      rec.topology = str(machines, "x", per_machine, " simulated");
      rec.median_us = sim.total_us;
      rec.tflops = tflops;
      rec.ok = true;
      rec.extra["hidden_fraction"] = sim.hidden_comm_fraction();
      rec.extra["mb_in_intra"] = mb_intra;
      rec.extra["mb_in_cross"] = mb_cross;
      rec.extra_text["plan"] = params;
      records.push_back(rec);
    }
  }
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  return 0;
}

const CommandRegistration kPlan("plan",
                                "plan + simulate an attention layer per method on a machine layout",
                                run_plan);

}  // namespace
}  // namespace tessera::cli
