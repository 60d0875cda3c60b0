// DeepSpeed-Ulysses planner (StreamFusion section 2.2).
//
// One all-to-all turns every rank's [own tokens, all heads] Q, K, V into [all tokens, head
// group u]; attention is then local; a second all-to-all returns O to the token owners.
// Head groups: query_head_group (the first H % P groups get one head more when P does not
// divide H). GQA: head group u reads kv heads kv_heads_for(group u); when there are fewer kv
// heads than ranks, a kv head is sent to every group that reads it (replication). Joint
// tokens: each rank attends all joint queries of its head group locally (joint KV is
// replicated) and the joint output is all-gathered over heads.
#include "plan_builder.h"
#include "planner_common.h"
#include "sequence_grid.h"
#include "tessera/core/error.h"

namespace tessera::sp {

Plan plan_ulysses(const PlanRequest& request) {
  const AttentionShape shape = request.shape();
  const TokenLayout layout = detail::resolve_layout(request, Method::kUlysses);
  const int P = request.topology.world_size;
  detail::check_head_groups(shape, P, "ulysses");
  detail::PlanBuilder b("ulysses", shape, request.topology, layout, request.options.comm, 2);
  const detail::Grid grid = detail::make_grid({detail::machine_major_order(request.topology)}, P);
  b.param("ulysses", std::to_string(P));
  if (shape.heads % P != 0) {
    b.note(str(P, " ranks do not divide ", shape.heads, " heads: head groups of ",
               shape.heads / P + 1, " and ", shape.heads / P, " (load imbalance)"));
  }
  if (shape.kv_heads < P) {
    b.note(str(shape.kv_heads, " kv heads < ", P, " ranks: kv heads are replicated"));
  }
  detail::plan_ulysses_ring(b, grid, request.options.comm == CommMode::kOneSided);
  return b.finish();
}

}  // namespace tessera::sp
