// Ring Attention planner (Liu et al.; StreamFusion section 2.2, Mesh-Attention section 2.2).
//
// P ranks in a ring (machine-major order, so a ring crosses each machine boundary once).
// Rank r keeps its Q and computes it against the KV chunk it holds at every one of P steps;
// two-sided, it forwards the chunk to r + 1 while computing (KV of rank r - s at step s);
// one-sided, it pulls the chunk of rank r + s + 1 from its owner (StreamFusion's RINGATTN).
// Causal: the zigzag (default) or striped layout balances the visible blocks over ranks;
// blocks the mask hides entirely are skipped. Joint tokens: rank r attends the r-th shard of
// the joint queries against every KV chunk passing by, and the joint output is all-gathered.
#include "plan_builder.h"
#include "planner_common.h"
#include "sequence_grid.h"
#include "tessera/core/error.h"

namespace tessera::sp {

Plan plan_ring(const PlanRequest& request) {
  const AttentionShape shape = request.shape();
  const TokenLayout layout = detail::resolve_layout(request, Method::kRing);
  const bool one_sided = request.options.comm == CommMode::kOneSided;
  detail::PlanBuilder b("ring", shape, request.topology, layout, request.options.comm, 2);
  std::vector<std::vector<int>> groups;
  for (int x : detail::machine_major_order(request.topology)) groups.push_back({x});
  const detail::Grid grid = detail::make_grid(groups, b.world());
  b.param("ring", std::to_string(b.world()));
  b.note(str("every rank receives the KV of all ", b.world() - 1,
             " others: 2(P-1)/P of the KV per rank, overlapped step by step"));
  detail::plan_ulysses_ring(b, grid, one_sided);
  return b.finish();
}

}  // namespace tessera::sp
