// Sequence-parallel attention planners: each turns a PlanRequest (shapes, mask, joint tokens,
// topology, method options) into a Plan (plan.h) that validator.h accepts.
//
//   ring     Ring Attention: KV chunks travel around all P ranks; each rank keeps its Q.
//            Layouts: contiguous, striped or zigzag (zigzag by default when causal).
//   ulysses  DeepSpeed-Ulysses: all-to-all of Q, K, V to (all tokens, head group), local
//            attention, all-to-all of O back. Head counts that P does not divide get uneven
//            head groups (the first H % P groups one head more); GQA with fewer KV heads than
//            P replicates each KV head to every group whose query heads read it. Needs H >= P.
//   usp      USP (xDiT/yunchang): Ulysses over Pu consecutive ranks (inside a machine),
//            Ring over the P / Pu groups (across machines). Pu defaults to gcd(M, H).
//   tas      StreamFusion's topology-aware SP: Ulysses across machines, Ring inside;
//            Pu = gcd(N * M, H) by default.
//   torus    StreamFusion's Torus Attention: TAS with the cross-machine all-to-alls broken
//            into Pull Q, Pull KV and Push O stages overlapped with attention on stationary
//            chunks. Two-sided (NCCL) or one-sided (scatter-push, gather-pull, barriers where
//            the paper has them). Needs each Ulysses group to span T machines with Pu / T
//            ranks on each.
//   mesh     Mesh-Attention: an a x b tile of the P x P block matrix per rank, Q groups and
//            KV groups as rings, the greedy overlap schedule of its Algorithm 2, tile shape
//            chosen by simulated runtime (striped layout by default when causal).
//   auto     all of the above that apply, timed by the sim executor; the fastest wins.
//
// Two-sided is the default communication; every method of the ring/Ulysses family (ring,
// ulysses, usp, tas, torus) also has a one-sided form. Mesh is two-sided.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/comm/topology.h"
#include "tessera/sp/cost_model.h"
#include "tessera/sp/plan.h"

namespace tessera::sp {

enum class Method : uint8_t { kAuto, kRing, kUlysses, kUsp, kTas, kTorus, kMesh };
const char* method_name(Method method);
Method parse_method(std::string_view text, std::string_view what = "method");

struct PlanOptions {
  Method method = Method::kAuto;
  CommMode comm = CommMode::kTwoSided;
  std::optional<TokenLayout> layout;  // unset: contiguous, or the method's causal default
  int ulysses_degree = 0;             // usp/tas/torus: Pu (0: the method's default)
  int mesh_rows = 0;                  // mesh tile a x b with a * b = P (0, 0: search)
  int mesh_cols = 0;
  DType partial_dtype = DType::kF32;
};

struct PlanRequest {
  int64_t batch = 1;
  int64_t seq_len = 0;  // image tokens, sharded over the ranks
  int heads = 0;
  int kv_heads = 0;  // 0: same as heads
  int head_dim = 0;
  DType dtype = DType::kBF16;
  bool causal = false;
  int64_t joint_tokens = 0;  // replicated text tokens in front (Flux/MMDiT)
  Topology topology;
  PlanOptions options;

  // Validates the request (throws kInvalidArgument naming the field) and returns its shape.
  AttentionShape shape() const;
};

// A DiT's joint attention: batch 1, `tokens` sharded sequence tokens beside `joint` replicated
// text tokens, `heads` heads (no GQA) of head_dim, not causal.
PlanRequest joint_attention_request(int64_t tokens, int64_t joint, int64_t heads, int64_t head_dim,
                                    DType dtype, const PlanOptions& options = {});

Plan plan_ring(const PlanRequest& request);
Plan plan_ulysses(const PlanRequest& request);
Plan plan_usp(const PlanRequest& request);
Plan plan_tas(const PlanRequest& request);
Plan plan_torus(const PlanRequest& request);
Plan plan_mesh(const PlanRequest& request, const CostModel& model);

// One candidate `auto` considered.
struct AutoCandidate {
  std::string label;  // "usp Pu=4 two-sided"
  bool feasible = false;
  std::string reason;  // why not, when infeasible
  double sim_us = 0.0;
  double exposed_us = 0.0;
  int64_t max_bytes_in = 0;
  int64_t cross_machine_bytes_in = 0;  // max over ranks
};

struct AutoChoice {
  Plan plan;
  std::vector<AutoCandidate> candidates;  // fastest first, then the infeasible ones
  std::string explanation;                // why the winner won, for people
};

AutoChoice plan_auto(const PlanRequest& request, const CostModel& model);

// Dispatches on request.options.method (auto returns plan_auto's plan).
Plan make_plan(const PlanRequest& request, const CostModel& model);

// ---- Mesh-Attention internals exposed for tests and tools ----------------------------------
// Compute blocks needed to hide one Q, KV or partial-O chunk transfer (at least 1 each).
struct MeshCosts {
  int q_blocks = 1;
  int kv_blocks = 1;
  int o_blocks = 1;
};
// One step of the greedy schedule: at most one communication and the blocks (local Q index,
// local KV index) computed while it runs. comm is 'Q' (recv Q), 'K' (recv KV), 'O' (send O)
// or 0 (none).
struct MeshStep {
  char comm = 0;
  std::vector<std::pair<int, int>> blocks;
};
// Algorithm 2 of the paper for an a x b tile (a Q chunks, b KV chunks per rank).
std::vector<MeshStep> mesh_greedy_schedule(int a, int b, const MeshCosts& costs);
MeshCosts mesh_costs(const PlanRequest& request, int a, int b, const CostModel& model);
// Per-rank bytes the paper's formula gives: (a-1) Q chunks + (b-1) KV chunks in, (a-1)
// partial O chunks in, for chunks of L / P tokens (L divisible by P, no joint tokens).
int64_t mesh_formula_bytes_in(const AttentionShape& shape, int world_size, int a, int b);

}  // namespace tessera::sp
