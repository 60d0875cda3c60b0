// Decodes fuzz bytes into a sequence-parallel plan request: a method and its options, a
// shape (GQA, joint tokens, causal, dtypes) and a topology built the ways a real run builds
// one (GPU machines, cpu ranks, emulated machines, ranks placed on machines in any order),
// plus rarely a raw topology whose fields disagree. Sizes are mostly small enough that a
// plan is made and validated in milliseconds; `draw` sends some to the edges of their type.
#pragma once

#include <algorithm>
#include <map>
#include <string>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/sp/planners.h"
#include "tessera/sp/sim.h"

namespace tessera::fuzz {

// The most ranks a fuzzed topology has: plans grow with P^2 transfers. `auto` plans and
// times every method (Mesh for every tile shape): at 16 ranks one input takes seconds.
constexpr int kMaxFuzzRanks = 16;
constexpr int kMaxFuzzRanksAuto = 8;

inline LinkClass link_class_from(uint8_t value) {
  return LinkClass(value % 5);
}

// Ranks placed on machines in any order (as mpirun's round-robin placement does): machine ids
// numbered by first appearance, local ranks in rank order, links from the placement.
inline Topology placed_topology(FuzzedDataProvider& in, int world_size, bool gpus) {
  Topology t;
  t.world_size = world_size;
  std::map<int, int> id_of;  // drawn machine -> compact id
  std::vector<int> count;
  for (int r = 0; r < world_size; ++r) {
    const int drawn = in.ConsumeIntegralInRange<int>(0, world_size - 1);
    auto [it, added] = id_of.emplace(drawn, int(id_of.size()));
    if (added) count.push_back(0);
    t.machine_of_rank.push_back(it->second);
    t.local_rank.push_back(count[it->second]++);
    t.host_name.push_back(str("machine", it->second));
    t.device_of_rank.push_back(gpus ? t.local_rank.back() : -1);
  }
  t.links.resize(size_t(world_size) * world_size);
  for (int a = 0; a < world_size; ++a) {
    for (int b = 0; b < world_size; ++b) {
      const bool same = t.machine_of_rank[a] == t.machine_of_rank[b];
      t.links[size_t(a) * world_size + b] =
          a == b ? LinkClass::kSelf
          : same ? (gpus ? LinkClass::kNVLink : LinkClass::kPCIe)
                 : (gpus ? LinkClass::kNetwork : LinkClass::kEmulatedNetwork);
    }
  }
  t.emulated = !gpus;
  return t;
}

// Fields drawn independently: sizes may disagree, machine ids may be negative or past P.
inline Topology raw_topology(FuzzedDataProvider& in, int max_ranks) {
  Topology t;
  t.world_size = draw_int(in, 1, 8);
  const int n = std::clamp(t.world_size, 0, max_ranks);
  const int entries = in.ConsumeIntegralInRange<int>(n > 0 ? n - 1 : 0, n + 1);
  for (int r = 0; r < entries; ++r) {
    t.machine_of_rank.push_back(in.ConsumeIntegralInRange<int>(-2, n + 1));
    t.local_rank.push_back(in.ConsumeIntegralInRange<int>(-2, n + 1));
  }
  const int links = in.ConsumeBool() ? n * n : in.ConsumeIntegralInRange<int>(0, n * n + 1);
  for (int i = 0; i < links; ++i) t.links.push_back(link_class_from(in.ConsumeIntegral<uint8_t>()));
  return t;
}

inline Topology decode_topology(FuzzedDataProvider& in, int max_ranks) {
  const int mode = in.ConsumeIntegralInRange<int>(0, 7);
  if (mode == 7) return raw_topology(in, max_ranks);
  const int machines = std::clamp(draw_int(in, 1, 4), -1, max_ranks);
  int per_machine = std::clamp(draw_int(in, 1, 8), -1, max_ranks);
  if (machines * per_machine > max_ranks) per_machine = max_ranks / machines;
  const int world = machines * per_machine;
  LinkSpec link;
  if (in.ConsumeBool()) {
    link.bandwidth_gbps = in.ConsumeFloatingPointInRange<double>(0.001, 1000.0);
    link.latency_us = in.ConsumeFloatingPointInRange<double>(0.0, 1000.0);
    link.preset = "custom";
  }
  switch (mode) {
    case 0:
    case 1:
      return sp::synthetic_topology(machines, per_machine, link);
    case 2:
      return cpu_topology(world, machines);
    case 3:
      return emulate_machines(sp::synthetic_topology(1, std::max(world, 1), link), machines, link);
    default:
      return placed_topology(in, std::max(world, 1), mode != 6);
  }
}

// Mostly 0 (the method's default); otherwise a small, possibly wrong, value.
inline int decode_method_option(FuzzedDataProvider& in, int world_size) {
  if (in.ConsumeIntegralInRange<int>(0, 2) != 0) return 0;
  return draw_int(in, -1, std::clamp(world_size, 1, kMaxFuzzRanks) + 1);
}

inline sp::CostModel decode_cost_model(FuzzedDataProvider& in, const Topology& topology) {
  sp::CostModel model = sp::CostModel::for_topology(topology);
  // Rarely, terms at odd but legal values (validate() refuses negative ones): the tile search
  // and auto must not turn extreme ratios into NaN or overflowing casts.
  const int overrides =
      in.ConsumeIntegralInRange<int>(0, 15) == 0 ? in.ConsumeIntegralInRange<int>(1, 3) : 0;
  constexpr const char* kTerms[] = {"nvlink_gbps",       "network_gbps",      "attn_tflops_d128",
                                    "attn_kv_half_rows", "num_sms",           "q_tile_rows",
                                    "launch_us",         "two_sided_step_us", "barrier_hops"};
  constexpr double kValues[] = {0.0, 1e-9, 1e-3, 1.0, 3.0, 1e6, 1e300};
  for (int i = 0; i < overrides; ++i) {
    const char* term = kTerms[in.ConsumeIntegralInRange<size_t>(0, std::size(kTerms) - 1)];
    model.set(term, kValues[in.ConsumeIntegralInRange<size_t>(0, std::size(kValues) - 1)]);
  }
  return model;
}

// Throws tessera::Error for topologies the constructors refuse (a finding is anything else).
inline sp::PlanRequest decode_plan_request(FuzzedDataProvider& in) {
  sp::PlanRequest r;
  r.options.method = sp::Method(in.ConsumeIntegralInRange<int>(0, 6));
  r.options.comm = in.ConsumeBool() ? sp::CommMode::kOneSided : sp::CommMode::kTwoSided;
  const int layout = in.ConsumeIntegralInRange<int>(0, 3);
  if (layout < 3) r.options.layout = sp::TokenLayout(layout);
  r.topology = decode_topology(
      in, r.options.method == sp::Method::kAuto ? kMaxFuzzRanksAuto : kMaxFuzzRanks);
  r.options.ulysses_degree = decode_method_option(in, r.topology.world_size);
  r.options.mesh_rows = decode_method_option(in, r.topology.world_size);
  r.options.mesh_cols = decode_method_option(in, r.topology.world_size);
  r.batch = draw(in, 1, 3);
  r.seq_len = draw(in, 1, in.ConsumeBool() ? 64 : 4096);
  r.joint_tokens = in.ConsumeBool() ? 0 : draw(in, 0, 80);
  r.heads = draw_int(in, 1, 32);
  // kv_heads: all heads, a divisor (GQA), or any value (possibly refused).
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      r.kv_heads = 0;
      break;
    case 1:
    case 2: {
      const int h = std::max(r.heads, 1);
      const int group = in.ConsumeIntegralInRange<int>(1, std::min(h, 64));
      r.kv_heads = h % group == 0 ? h / group : h;
      break;
    }
    default:
      r.kv_heads = draw_int(in, -1, 33);
  }
  constexpr int kHeadDims[] = {1, 3, 8, 16, 64, 128, 256};
  r.head_dim =
      in.ConsumeBool() ? kHeadDims[in.ConsumeIntegralInRange<size_t>(0, 6)] : draw_int(in, 1, 512);
  r.dtype = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? DType(in.ConsumeIntegralInRange<int>(0, 6))
                                                      : DType::kBF16;
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    r.options.partial_dtype = DType(in.ConsumeIntegralInRange<int>(0, 6));
  }
  r.causal = in.ConsumeBool();
  return r;
}

inline std::string describe(const sp::PlanRequest& r) {
  std::string topo;
  for (size_t i = 0; i < r.topology.machine_of_rank.size(); ++i) {
    topo += str(i ? "," : "", r.topology.machine_of_rank[i]);
  }
  return str("method ", sp::method_name(r.options.method), " ", sp::comm_mode_name(r.options.comm),
             " layout ", r.options.layout ? sp::token_layout_name(*r.options.layout) : "default",
             " Pu ", r.options.ulysses_degree, " mesh ", r.options.mesh_rows, "x",
             r.options.mesh_cols, "\nB ", r.batch, " L ", r.seq_len, " J ", r.joint_tokens, " H ",
             r.heads, " KV ", r.kv_heads, " D ", r.head_dim, " dtype ", dtype_name(r.dtype),
             " partial ", dtype_name(r.options.partial_dtype), r.causal ? " causal" : "",
             "\ntopology: P ", r.topology.world_size, " machine of rank [", topo, "]");
}

// With TESSERA_FUZZ_DESCRIBE set (when replaying a crash to turn it into a test), prints the
// decoded request and cost model.
inline void describe_when_asked(const sp::PlanRequest& r, const sp::CostModel& model) {
  if (std::getenv("TESSERA_FUZZ_DESCRIBE") == nullptr) return;
  std::fprintf(stderr, "%s\ncost model: %s\n", describe(r).c_str(), model.describe().c_str());
}

}  // namespace tessera::fuzz
