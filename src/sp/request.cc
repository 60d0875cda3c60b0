// Shared planner plumbing: request validation, method names, default layouts, dispatch.
#include <algorithm>
#include <numeric>

#include "planner_common.h"
#include "tessera/core/error.h"
#include "tessera/sp/planners.h"

namespace tessera::sp {

const char* method_name(Method method) {
  switch (method) {
    case Method::kAuto:
      return "auto";
    case Method::kRing:
      return "ring";
    case Method::kUlysses:
      return "ulysses";
    case Method::kUsp:
      return "usp";
    case Method::kTas:
      return "tas";
    case Method::kTorus:
      return "torus";
    case Method::kMesh:
      return "mesh";
  }
  return "unknown";
}

Method parse_method(std::string_view text, std::string_view what) {
  for (Method m : {Method::kAuto, Method::kRing, Method::kUlysses, Method::kUsp, Method::kTas,
                   Method::kTorus, Method::kMesh}) {
    if (text == method_name(m)) return m;
  }
  if (text == "streamfusion") return Method::kTorus;
  throw_error(ErrorCode::kInvalidArgument,
              str(what, " = '", text,
                  "': expected auto, ring, ulysses, usp, tas, torus (streamfusion) or mesh"));
}

PlanRequest joint_attention_request(int64_t tokens, int64_t joint, int64_t heads, int64_t head_dim,
                                    DType dtype, const PlanOptions& options) {
  PlanRequest request;
  request.batch = 1;
  request.seq_len = tokens;
  request.heads = request.kv_heads = int(heads);
  request.head_dim = int(head_dim);
  request.dtype = dtype;
  request.joint_tokens = joint;
  request.options = options;
  return request;
}

AttentionShape PlanRequest::shape() const {
  TESSERA_CHECK_ARG(batch >= 1, "batch = ", batch, ": expected >= 1");
  TESSERA_CHECK_ARG(seq_len >= 1, "seq_len = ", seq_len, ": expected >= 1");
  TESSERA_CHECK_ARG(heads >= 1, "heads = ", heads, ": expected >= 1");
  const int kv = kv_heads == 0 ? heads : kv_heads;
  TESSERA_CHECK_ARG(kv >= 1 && heads % kv == 0, "kv_heads = ", kv_heads,
                    ": expected a divisor of heads = ", heads, " (or 0 for heads)");
  TESSERA_CHECK_ARG(head_dim >= 1, "head_dim = ", head_dim, ": expected >= 1");
  TESSERA_CHECK_ARG(joint_tokens >= 0, "joint_tokens = ", joint_tokens, ": expected >= 0");
  TESSERA_CHECK_ARG(dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32,
                    "dtype = ", dtype_name(dtype), ": expected bf16, f16 or f32");
  const DType pd = options.partial_dtype;
  // attn::AttnState keeps O in f32; partials sent in bf16 would halve Mesh's and Torus's O
  // traffic but need a widening merge first.
  TESSERA_CHECK(pd == DType::kF32, ErrorCode::kUnsupported, "partial_dtype = ", dtype_name(pd),
                ": only f32 partial states are planned (attn::AttnState is f32)");
  const Topology& t = topology;
  const size_t P = size_t(std::max(t.world_size, 0));
  TESSERA_CHECK_ARG(t.world_size >= 1 && t.machine_of_rank.size() == P &&
                        t.local_rank.size() == P && t.links.size() == P * P,
                    "topology: world_size = ", t.world_size, " with ", t.machine_of_rank.size(),
                    " machine entries, ", t.local_rank.size(), " local ranks and ", t.links.size(),
                    " links: expected P, P, P and P*P");
  // Planners index per-machine tables by these ids.
  for (int r = 0; r < t.world_size; ++r) {
    TESSERA_CHECK_ARG(t.machine_of_rank[r] >= 0 && t.machine_of_rank[r] < t.world_size,
                      "topology: machine_of_rank[", r, "] = ", t.machine_of_rank[r],
                      ": expected a machine index in [0, ", t.world_size, ")");
  }
  AttentionShape s;
  s.batch = batch;
  s.seq_len = seq_len;
  s.joint_tokens = joint_tokens;
  s.heads = heads;
  s.kv_heads = kv;
  s.head_dim = head_dim;
  s.dtype = dtype;
  s.partial_dtype = pd;
  s.causal = causal;
  const std::string problem = shape_error(s);  // sizes whose byte counts would overflow
  TESSERA_CHECK_ARG(problem.empty(), problem);
  return s;
}

Plan make_plan(const PlanRequest& request, const CostModel& model) {
  switch (request.options.method) {
    case Method::kAuto:
      return plan_auto(request, model).plan;
    case Method::kRing:
      return plan_ring(request);
    case Method::kUlysses:
      return plan_ulysses(request);
    case Method::kUsp:
      return plan_usp(request);
    case Method::kTas:
      return plan_tas(request);
    case Method::kTorus:
      return plan_torus(request);
    case Method::kMesh:
      return plan_mesh(request, model);
  }
  throw_error(ErrorCode::kInvalidArgument, "method: unknown value");
}

namespace detail {

TokenLayout resolve_layout(const PlanRequest& request, Method method) {
  if (request.options.layout) return *request.options.layout;
  if (!request.causal) return TokenLayout::kContiguous;
  // Causal: balance the work per rank. Mesh-Attention uses striping (its section 3.7); the
  // ring family zigzag (as yunchang/xDiT do).
  return method == Method::kMesh ? TokenLayout::kStriped : TokenLayout::kZigzag;
}

int num_machines(const Topology& topology) {
  int n = 0;
  for (int m : topology.machine_of_rank) n = std::max(n, m + 1);
  return n;
}

int gpus_per_machine(const Topology& topology) {
  const int n = num_machines(topology);
  std::vector<int> count(size_t(n), 0);
  for (int m : topology.machine_of_rank) ++count[m];
  for (int c : count) {
    if (c != count[0]) return 0;  // irregular
  }
  return count.empty() ? 0 : count[0];
}

std::vector<int> machine_major_order(const Topology& topology) {
  std::vector<int> order(size_t(topology.world_size));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::make_pair(topology.machine_of_rank[a], topology.local_rank[a]) <
           std::make_pair(topology.machine_of_rank[b], topology.local_rank[b]);
  });
  return order;
}

void check_head_groups(const AttentionShape& shape, int pu, const char* method) {
  TESSERA_CHECK(shape.heads >= pu, ErrorCode::kUnsupported, method, ": Ulysses degree ", pu,
                " exceeds heads = ", shape.heads,
                ": every Ulysses rank needs a query head (use a smaller degree, usp or ring)");
}

}  // namespace detail
}  // namespace tessera::sp
