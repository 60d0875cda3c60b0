// The sim executor: runs a plan's steps as a discrete-event simulation on a CostModel and
// reports when each step starts and ends. It follows the plan's semantics exactly (streams in
// order, deps, two-sided transfers start when both sides have started, collectives and
// barriers when all members have, waits when their signal is complete), and adds what the
// cost model says a step takes:
//   - a transfer moves once both sides are ready, as a flow through its source's egress and
//     its destination's ingress of its link class (and both GPUs' sockets for two-sided
//     traffic between emulated machines); flows in flight share each port max-min fairly
//     (sim_network.h), so transfers on one class share it and different classes (NVLink,
//     network) overlap. A one-sided step moves its transfers one after another, in plan order;
//   - attention blocks, merges and finalizes run one at a time on the compute stream; an
//     attention launch runs slower while NCCL steps or copies inside the machine run beside it.
// The result is what `auto` and Mesh's tile search compare, and projects a plan to machine
// counts we cannot run. It is a model: contention inside a switch, kernel-level overlap
// effects other than those two slowdowns, and clock skew are not simulated.
#pragma once

#include <string>
#include <vector>

#include "tessera/sp/cost_model.h"
#include "tessera/sp/plan.h"

namespace tessera::sp {

struct SimStepTime {
  int rank = 0;
  int step = 0;
  double start_us = 0.0;
  double end_us = 0.0;
};

struct SimResult {
  double total_us = 0.0;              // when the last rank ends
  std::vector<double> rank_end_us;    // per rank
  std::vector<double> compute_us;     // per rank: time its compute stream is busy
  std::vector<double> comm_us;        // per rank: time any of its transfers is in flight
  std::vector<int64_t> bytes_in;      // per rank: bytes received
  std::vector<SimStepTime> timeline;  // every step, by rank then step index

  // max over ranks of (end - compute busy): time not hidden behind compute.
  double exposed_us() const;
  // Share of the ranks' communication time that overlapped compute:
  // 1 - sum(end - compute busy) / sum(comm busy), clamped to [0, 1]; 1 when nothing moved.
  double hidden_comm_fraction() const;
  std::string to_json() const;
};

// Throws kInvalidArgument if the plan deadlocks under the simulation (validate it first).
SimResult simulate(const Plan& plan, const CostModel& model);

// A synthetic topology for projections: `machines` x `gpus_per_machine` ranks, NVLink inside
// a machine, `cross` between machines (kNetwork).
Topology synthetic_topology(int machines, int gpus_per_machine, const LinkSpec& cross);

}  // namespace tessera::sp
