// USP planner (Fang & Zhao; xDiT/yunchang; StreamFusion section 2.2): Ulysses over groups of
// Pu consecutive ranks (inside a machine when Pu divides the GPUs per machine), Ring over the
// P / Pu groups (across machines). Pu defaults to gcd(M, H) with M the GPUs per machine, the
// largest intra-machine Ulysses degree with whole head groups.
#include <numeric>

#include "plan_builder.h"
#include "planner_common.h"
#include "sequence_grid.h"
#include "tessera/core/error.h"

namespace tessera::sp {

Plan plan_usp(const PlanRequest& request) {
  const AttentionShape shape = request.shape();
  const TokenLayout layout = detail::resolve_layout(request, Method::kUsp);
  const Topology& topo = request.topology;
  const int P = topo.world_size;
  const int M = std::max(1, detail::gpus_per_machine(topo));
  int pu = request.options.ulysses_degree;
  if (pu == 0) pu = std::gcd(std::gcd(M, shape.heads), P);
  TESSERA_CHECK_ARG(pu >= 1 && P % pu == 0, "ulysses_degree = ", request.options.ulysses_degree,
                    ": expected a divisor of the ", P, " ranks");
  detail::check_head_groups(shape, pu, "usp");
  detail::PlanBuilder b("usp", shape, topo, layout, request.options.comm, 2);
  const std::vector<int> order = detail::machine_major_order(topo);
  std::vector<std::vector<int>> groups;
  for (int k = 0; k < P / pu; ++k) {
    groups.emplace_back(order.begin() + k * pu, order.begin() + (k + 1) * pu);
  }
  const detail::Grid grid = detail::make_grid(groups, P);
  b.param("Pu", std::to_string(pu));
  b.param("Pr", std::to_string(P / pu));
  b.note(str("Ulysses over ", pu, " consecutive ranks (",
             pu <= M && M % pu == 0 ? "inside" : "across", " machines), Ring over ", P / pu,
             " groups"));
  detail::plan_ulysses_ring(b, grid, request.options.comm == CommMode::kOneSided);
  return b.finish();
}

}  // namespace tessera::sp
