// Helpers for the sequence-parallel planning tests: topologies and requests.
#pragma once

#include <string>
#include <vector>

#include "tessera/sp/planners.h"
#include "tessera/sp/sim.h"

namespace tessera::sp::testing {

// `machines` x `per_machine` ranks: NVLink inside a machine, a 50 GB/s network across.
inline Topology gpu_topology(int machines, int per_machine, double cross_gbps = 50.0,
                             double cross_latency_us = 5.0) {
  LinkSpec link;
  link.bandwidth_gbps = cross_gbps;
  link.latency_us = cross_latency_us;
  link.preset = "custom";
  return synthetic_topology(machines, per_machine, link);
}

inline PlanRequest request(const Topology& topo, Method method, int64_t seq_len, int heads,
                           int kv_heads, bool causal, int64_t joint, int head_dim = 16) {
  PlanRequest r;
  r.batch = 2;
  r.seq_len = seq_len;
  r.heads = heads;
  r.kv_heads = kv_heads;
  r.head_dim = head_dim;
  r.causal = causal;
  r.joint_tokens = joint;
  r.topology = topo;
  r.options.method = method;
  return r;
}

struct HeadCase {
  int heads;
  int kv_heads;
};

// Head counts that do (8) and do not (6, 5) divide typical degrees, GQA ratios 1, 4 and 8.
inline std::vector<HeadCase> head_cases() {
  return {{8, 8}, {6, 6}, {8, 2}, {16, 2}, {5, 5}};
}

// (ranks, machines) pairs: 1..8 ranks on 1..4 machines that divide them.
inline std::vector<std::pair<int, int>> topology_cases() {
  std::vector<std::pair<int, int>> cases;
  for (int p = 1; p <= 8; ++p) {
    for (int n = 1; n <= 4; ++n) {
      if (p % n == 0) cases.push_back({p, n});
    }
  }
  return cases;
}

}  // namespace tessera::sp::testing
