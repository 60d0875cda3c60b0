// The sequence-parallel attention executor on the cpu backend: for every method (ring in every
// layout, ulysses, usp, tas, torus two- and one-sided, mesh over each of its tiles, auto), the
// outputs of all ranks together equal a single-rank float32 reference computed with attn's cpu
// reference on the whole sequence. Swept over 1..8 ranks in 1..4 machines with shapes sampled
// so every axis is covered: head counts that do and do not divide, GQA ratios 1, 4 and 8,
// causal and not, sequence lengths P does not divide (and shorter than P), with and without
// joint tokens, batch 1 and 2. Outputs are poisoned (NaN) before each run and must all be
// written. Also: the error does not grow with P, runs repeat with new inputs, caller tensors
// may be strided, arguments are checked with messages naming them, and the per-rank issue
// order cannot deadlock where the plan's index order would.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../../src/sp/executor.h"
#include "dist/cpu_dist_util.h"
#include "tessera/attn/reference.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::sp {
namespace {

using tessera::testing::all_layouts;
using tessera::testing::expect_error;
using tessera::testing::Layout;
using tessera::testing::ScopedWaitTimeout;

constexpr double kF32Tolerance = 2e-5;

struct ShapeCase {
  int64_t batch = 1;
  int64_t seq_len = 0;
  int64_t joint = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 8;
  bool causal = false;
  DType dtype = DType::kF32;

  std::string to_string() const {
    return str("B", batch, " L", seq_len, " J", joint, " H", heads, "/", kv_heads, " D", head_dim,
               causal ? " causal" : "", " ", dtype_name(dtype));
  }
};

// Head counts that do (8, 16) and do not (6, 5) divide the degrees; GQA ratios 1, 4 and 8.
struct Heads {
  int heads;
  int kv_heads;
};
const Heads kHeadCases[] = {{8, 8}, {6, 6}, {8, 2}, {16, 2}, {5, 5}};

// Every combination of heads x causal x joint x length for P ranks (40 of them); lengths that
// P does not divide, one of them shorter than P when P > 5.
std::vector<ShapeCase> shape_cases(int P) {
  std::vector<ShapeCase> cases;
  for (const Heads& h : kHeadCases) {
    for (bool causal : {false, true}) {
      for (int64_t joint : {int64_t(0), int64_t(3)}) {
        for (int64_t L : {int64_t(2 * P + (P > 1 ? P - 1 : 2)), int64_t(5)}) {
          ShapeCase c;
          c.seq_len = L;
          c.joint = joint;
          c.heads = h.heads;
          c.kv_heads = h.kv_heads;
          c.causal = causal;
          c.batch = cases.size() % 3 == 2 ? 2 : 1;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

// The whole problem: inputs of the full sequence [joint; image] and the float32 reference.
struct Problem {
  ShapeCase shape;
  std::vector<float> q, k, v;  // [B, J + L, H | Hkv, D], values representable in the dtype
  attn::ReferenceResult ref;   // [B, J + L, H, D]
};

Problem make_problem(const ShapeCase& s, uint32_t seed) {
  Problem p;
  p.shape = s;
  const int64_t T = s.joint + s.seq_len;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, int heads) {
    x.resize(size_t(s.batch * T * heads * s.head_dim));
    for (float& e : x) e = round_to_dtype(s.dtype, dist(rng));
  };
  fill(p.q, s.heads);
  fill(p.k, s.kv_heads);
  fill(p.v, s.kv_heads);
  const TensorView q(p.q.data(), DType::kF32, Device::cpu(), {s.batch, T, s.heads, s.head_dim});
  const TensorView k(p.k.data(), DType::kF32, Device::cpu(), {s.batch, T, s.kv_heads, s.head_dim});
  const TensorView v(p.v.data(), DType::kF32, Device::cpu(), {s.batch, T, s.kv_heads, s.head_dim});
  const attn::KvChunk chunk{k, v,
                            s.causal ? attn::MaskSpec::causal_at(0, 0) : attn::MaskSpec::none()};
  p.ref = attn::reference_attention(q, std::span<const attn::KvChunk>(&chunk, 1),
                                    attn::default_softmax_scale(s.head_dim));
  return p;
}

PlanRequest make_request(const ShapeCase& s, const PlanOptions& options) {
  PlanRequest r;
  r.batch = s.batch;
  r.seq_len = s.seq_len;
  r.heads = s.heads;
  r.kv_heads = s.kv_heads;
  r.head_dim = s.head_dim;
  r.dtype = s.dtype;
  r.causal = s.causal;
  r.joint_tokens = s.joint;
  r.options = options;
  return r;  // topology: the context's
}

ContextOptions context_options() {
  ContextOptions o;
  o.heap_bytes = size_t(1) << 22;
  // Emulated machines without pacing delays: correctness does not depend on link speed.
  o.emulated_link.bandwidth_gbps = 1e6;
  o.emulated_link.latency_us = 0.0;
  o.emulated_link.preset = "custom";
  return o;
}

// Copies rows of the full-sequence array `full` [B, T, heads, D] at the given global positions
// into a new tensor [B, rows, heads, D] of `dtype`.
Tensor gather_rows(const std::vector<float>& full, const ShapeCase& s, int heads,
                   const std::vector<int64_t>& positions) {
  const int64_t T = s.joint + s.seq_len;
  const int64_t rows = int64_t(positions.size());
  Tensor t = Tensor::empty({s.batch, rows, heads, s.head_dim}, s.dtype, Device::cpu());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < s.head_dim; ++d) {
          const float x = full[size_t(((b * T + positions[i]) * heads + h) * s.head_dim + d)];
          store_from_float(t.data(), s.dtype, ((b * rows + i) * heads + h) * s.head_dim + d, x);
        }
  return t;
}

Tensor poisoned(const ShapeCase& s, int64_t rows) {
  Tensor t = Tensor::empty({s.batch, rows, s.heads, s.head_dim}, s.dtype, Device::cpu());
  for (int64_t i = 0; i < t.view().numel(); ++i) {
    store_from_float(t.data(), s.dtype, i, std::numeric_limits<float>::quiet_NaN());
  }
  return t;
}

struct Check {
  double max_error = 0.0;
  int64_t unwritten = 0;  // NaN left from the poison
};

// Compares `out` [B, rows, H, D] with the reference rows at `positions`.
void compare(const Tensor& out, const Problem& p, const std::vector<int64_t>& positions, Check& c) {
  const ShapeCase& s = p.shape;
  const int64_t rows = int64_t(positions.size());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t d = 0; d < s.head_dim; ++d) {
          const float got =
              load_as_float(out.data(), s.dtype, ((b * rows + i) * s.heads + h) * s.head_dim + d);
          if (std::isnan(got)) {
            ++c.unwritten;
            continue;
          }
          c.max_error =
              std::max(c.max_error, double(std::fabs(got - p.ref.o_at(b, positions[i], h, d))));
        }
}

std::vector<int64_t> positions_of(const std::vector<TokenRun>& runs) {
  std::vector<int64_t> pos;
  for (const TokenRun& r : runs)
    for (int64_t i = 0; i < r.count; ++i) pos.push_back(r.at(i));
  return pos;
}

struct Outcome {
  bool planned = false;
  std::string refusal;  // kUnsupported message when not planned
  Check check;
  std::string summary;  // the plan, for messages
};

// Runs `options` on P ranks in N machines, `runs` times (fresh inputs are the same problem),
// and checks every rank's outputs against the reference.
Outcome run_distributed(const Problem& p, const PlanOptions& options, int P, int N, int runs = 1) {
  Outcome out;
  std::vector<Check> checks(static_cast<size_t>(P));
  std::vector<std::string> summaries(static_cast<size_t>(P));
  const ShapeCase& s = p.shape;
  try {
    run_cpu_ranks(P, N, context_options(), [&](RankContext& ctx) {
      auto layer = SpAttention::create(ctx, make_request(s, options));
      summaries[ctx.rank] = layer->plan().summary();
      const std::vector<int64_t> pos = positions_of(layer->local_tokens());
      EXPECT_EQ(int64_t(pos.size()), layer->local_rows());
      std::vector<int64_t> joint_pos(size_t(s.joint));
      for (int64_t j = 0; j < s.joint; ++j) joint_pos[j] = j;
      const Tensor q = gather_rows(p.q, s, s.heads, pos);
      const Tensor k = gather_rows(p.k, s, s.kv_heads, pos);
      const Tensor v = gather_rows(p.v, s, s.kv_heads, pos);
      const Tensor jq = gather_rows(p.q, s, s.heads, joint_pos);
      const Tensor jk = gather_rows(p.k, s, s.kv_heads, joint_pos);
      const Tensor jv = gather_rows(p.v, s, s.kv_heads, joint_pos);
      const Stream stream = Stream::cpu();
      for (int r = 0; r < runs; ++r) {
        const Tensor o = poisoned(s, int64_t(pos.size()));
        if (s.joint > 0) {
          const Tensor jo = poisoned(s, s.joint);
          layer->run(q, k, v, o, jq, jk, jv, jo, stream);
          compare(jo, p, joint_pos, checks[ctx.rank]);
        } else {
          layer->run(q, k, v, o, stream);
        }
        compare(o, p, pos, checks[ctx.rank]);
      }
    });
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    out.refusal = e.what();
    return out;
  }
  out.planned = true;
  out.summary = summaries[0];
  for (const Check& c : checks) {
    out.check.max_error = std::max(out.check.max_error, c.max_error);
    out.check.unwritten += c.unwritten;
  }
  return out;
}

std::string options_name(const PlanOptions& o) {
  std::string s = str(method_name(o.method), " ", comm_mode_name(o.comm));
  if (o.layout) s += str(" ", token_layout_name(*o.layout));
  if (o.ulysses_degree) s += str(" Pu=", o.ulysses_degree);
  if (o.mesh_rows) s += str(" tile ", o.mesh_rows, "x", o.mesh_cols);
  return s;
}

struct SweepCounts {
  int planned = 0;
  int refused = 0;
};

// One case: plan and run, then check the outputs.
void check_case(const ShapeCase& shape, const PlanOptions& options, const Layout& layout,
                bool may_refuse, SweepCounts& counts, uint32_t seed) {
  const std::string what = str(options_name(options), " on ", layout.ranks, " ranks x ",
                               layout.machines, " machines, ", shape.to_string());
  SCOPED_TRACE(what);
  const Problem problem = make_problem(shape, seed);
  Outcome o;
  try {
    o = run_distributed(problem, options, layout.ranks, layout.machines);
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  if (!o.planned) {
    EXPECT_TRUE(may_refuse) << what << ": refused: " << o.refusal;
    ++counts.refused;
    return;
  }
  ++counts.planned;
  EXPECT_EQ(o.check.unwritten, 0) << what << ": output elements left unwritten; " << o.summary;
  EXPECT_LE(o.check.max_error, kF32Tolerance) << what << ": " << o.summary;
}

// Every (ranks, machines) layout with `per_layout` sampled shapes each; `configure` may adapt
// the options to the layout (return false to skip the layout).
template <typename Configure>
SweepCounts sweep(PlanOptions base, int per_layout, bool may_refuse, int salt,
                  const Configure& configure) {
  ScopedWaitTimeout timeout(20000);
  SweepCounts counts;
  const std::vector<Layout> layouts = all_layouts();
  for (size_t li = 0; li < layouts.size(); ++li) {
    const Layout& layout = layouts[li];
    PlanOptions options = base;
    if (!configure(options, layout)) continue;
    const std::vector<ShapeCase> cases = shape_cases(layout.ranks);
    for (int k = 0; k < per_layout; ++k) {
      const size_t pick =
          (li * size_t(per_layout) * 7 + size_t(k) * 11 + size_t(salt)) % cases.size();
      check_case(cases[pick], options, layout, may_refuse, counts, uint32_t(1000 * li + k + salt));
    }
  }
  return counts;
}

SweepCounts sweep(PlanOptions base, int per_layout, bool may_refuse, int salt) {
  return sweep(base, per_layout, may_refuse, salt,
               [](PlanOptions&, const Layout&) { return true; });
}

PlanOptions options_for(Method method, CommMode comm = CommMode::kTwoSided,
                        std::optional<TokenLayout> layout = std::nullopt) {
  PlanOptions o;
  o.method = method;
  o.comm = comm;
  o.layout = layout;
  return o;
}

// ---- methods ---------------------------------------------------------------------------------

TEST(SpExecutor, RingDefaultLayouts) {
  const SweepCounts c = sweep(options_for(Method::kRing), 6, false, 1);
  EXPECT_GT(c.planned, 0);
}

TEST(SpExecutor, RingStripedAndZigzag) {
  const SweepCounts a =
      sweep(options_for(Method::kRing, CommMode::kTwoSided, TokenLayout::kStriped), 4, false, 2);
  const SweepCounts b =
      sweep(options_for(Method::kRing, CommMode::kTwoSided, TokenLayout::kZigzag), 4, false, 3);
  EXPECT_GT(a.planned + b.planned, 0);
}

TEST(SpExecutor, RingOneSided) {
  const SweepCounts c = sweep(options_for(Method::kRing, CommMode::kOneSided), 4, false, 4);
  EXPECT_GT(c.planned, 0);
}

TEST(SpExecutor, UlyssesTwoAndOneSided) {
  // Ulysses needs a query head per rank: fewer heads than ranks are refused.
  const SweepCounts a = sweep(options_for(Method::kUlysses), 4, true, 5);
  const SweepCounts b = sweep(options_for(Method::kUlysses, CommMode::kOneSided), 4, true, 6);
  EXPECT_GT(a.planned, 10);
  EXPECT_GT(b.planned, 10);
}

TEST(SpExecutor, UspDefaultAndDegreeTwo) {
  const SweepCounts a = sweep(options_for(Method::kUsp), 4, true, 7);
  const SweepCounts b =
      sweep(options_for(Method::kUsp), 2, true, 8, [](PlanOptions& o, const Layout& l) {
        o.ulysses_degree = 2;
        return l.ranks % 2 == 0;
      });
  const SweepCounts c = sweep(options_for(Method::kUsp, CommMode::kOneSided), 2, true, 9);
  EXPECT_GT(a.planned, 10);
  EXPECT_GT(b.planned, 5);
  EXPECT_GT(c.planned, 5);
}

TEST(SpExecutor, TasTwoAndOneSided) {
  const SweepCounts a = sweep(options_for(Method::kTas), 3, true, 10);
  const SweepCounts b = sweep(options_for(Method::kTas, CommMode::kOneSided), 3, true, 11);
  EXPECT_GT(a.planned, 10);
  EXPECT_GT(b.planned, 10);
}

TEST(SpExecutor, TorusTwoAndOneSided) {
  // Torus needs every Ulysses group to be T machines x the same ranks: refusals are allowed.
  const SweepCounts a = sweep(options_for(Method::kTorus), 3, true, 12);
  const SweepCounts b = sweep(options_for(Method::kTorus, CommMode::kOneSided), 3, true, 13);
  EXPECT_GT(a.planned, 10);
  EXPECT_GT(b.planned, 10);
}

TEST(SpExecutor, TorusAcrossMachinesWithRingGroups) {
  // 2 machines x 2 and 2 machines x 4 with Pu = 2 and 4: T = 2 and rings inside machines, so
  // Pull KV stages (and, one-sided, the ring-group barriers built from signals) run.
  ScopedWaitTimeout timeout(20000);
  SweepCounts counts;
  const std::vector<ShapeCase> cases = shape_cases(8);
  int k = 0;
  for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
    for (const auto& [P, N, pu] :
         {std::tuple{4, 2, 2}, std::tuple{8, 2, 2}, std::tuple{8, 2, 4}, std::tuple{8, 4, 4}}) {
      PlanOptions o = options_for(Method::kTorus, comm);
      o.ulysses_degree = pu;
      for (int rep = 0; rep < 2; ++rep, ++k) {
        ShapeCase s = cases[size_t(k * 13) % cases.size()];
        if (s.heads < pu) s.heads = s.kv_heads = 8;
        check_case(s, o, {P, N}, false, counts, uint32_t(500 + k));
      }
    }
  }
  EXPECT_EQ(counts.refused, 0);
}

TEST(SpExecutor, MeshEveryTile) {
  ScopedWaitTimeout timeout(20000);
  SweepCounts counts;
  int salt = 0;
  for (const Layout& layout : all_layouts()) {
    const std::vector<ShapeCase> cases = shape_cases(layout.ranks);
    for (int a = 1; a <= layout.ranks; ++a) {
      if (layout.ranks % a != 0) continue;
      PlanOptions o = options_for(Method::kMesh);
      o.mesh_rows = a;
      o.mesh_cols = layout.ranks / a;
      for (int rep = 0; rep < 2; ++rep) {
        ++salt;
        check_case(cases[size_t(salt * 17) % cases.size()], o, layout, false, counts,
                   uint32_t(salt));
      }
    }
  }
  EXPECT_GT(counts.planned, 30);
}

TEST(SpExecutor, MeshTileSearch) {
  const SweepCounts c = sweep(options_for(Method::kMesh), 2, false, 14);
  EXPECT_GT(c.planned, 0);
}

TEST(SpExecutor, Auto) {
  const SweepCounts c = sweep(options_for(Method::kAuto), 2, false, 15);
  EXPECT_GT(c.planned, 0);
}

// ---- properties ------------------------------------------------------------------------------

// Partial states merge in float32, so the error does not grow with the number of ranks: one
// bf16 problem on 2 and on 8 ranks, causal with joint tokens, has about the same error (the
// output rounding's), and both stay near the float32 reference.
TEST(SpExecutor, ErrorDoesNotGrowWithRanks) {
  ScopedWaitTimeout timeout(20000);
  ShapeCase s;
  s.batch = 1;
  s.seq_len = 64;
  s.joint = 5;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.causal = true;
  s.dtype = DType::kBF16;
  const Problem p = make_problem(s, 77);
  for (const PlanOptions& o :
       {options_for(Method::kRing), options_for(Method::kUsp), options_for(Method::kMesh),
        options_for(Method::kTorus, CommMode::kOneSided)}) {
    const Outcome two = run_distributed(p, o, 2, 1);
    const Outcome eight = run_distributed(p, o, 8, 2);
    ASSERT_TRUE(two.planned && eight.planned) << options_name(o);
    EXPECT_EQ(two.check.unwritten + eight.check.unwritten, 0) << options_name(o);
    // bf16 output rounding of values below 1: at most 2^-8.
    EXPECT_LE(two.check.max_error, 1.0 / 256) << options_name(o);
    EXPECT_LE(eight.check.max_error, 1.0 / 256) << options_name(o);
    EXPECT_LE(eight.check.max_error, 1.5 * two.check.max_error + 1e-4)
        << options_name(o) << ": P=2 error " << two.check.max_error << ", P=8 error "
        << eight.check.max_error;
  }
}

// The executor's buffers, signals and barriers are reusable: three runs of one layer, each
// on poisoned outputs, all correct.
TEST(SpExecutor, RunsRepeatedly) {
  ScopedWaitTimeout timeout(20000);
  ShapeCase s;
  s.seq_len = 21;
  s.joint = 3;
  s.heads = 8;
  s.kv_heads = 2;
  s.causal = true;
  const Problem p = make_problem(s, 5);
  for (const PlanOptions& o : {options_for(Method::kTorus, CommMode::kOneSided),
                               options_for(Method::kUlysses, CommMode::kOneSided),
                               options_for(Method::kMesh), options_for(Method::kUsp)}) {
    PlanOptions opt = o;
    if (o.method == Method::kTorus) opt.ulysses_degree = 4;
    const Outcome out = run_distributed(p, opt, 8, 2, 3);
    ASSERT_TRUE(out.planned) << options_name(opt) << ": " << out.refusal;
    EXPECT_EQ(out.check.unwritten, 0) << options_name(opt);
    EXPECT_LE(out.check.max_error, kF32Tolerance) << options_name(opt) << ": " << out.summary;
  }
}

// Across emulated machines every one-sided transfer pays the link's latency, so a plane of a
// region must move as a few pitched transfers (in the remote slot's storage order: staged
// slots are head-major), never one per token row. With a 2 ms latency and 64 rows per rank,
// per-row transfers would take over 0.25 s per plane; per-plane ones take 20-40 ms a run
// (2x2 and 4x1). The bound applies to what the latency adds over the same run on a link
// without latency, so a slower build (sanitizers) does not count its compute as latency.
TEST(SpExecutor, OneSidedTransfersPayLatencyPerPlaneNotPerRow) {
  ScopedWaitTimeout timeout(20000);
  ShapeCase s;
  s.seq_len = 256;
  s.heads = s.kv_heads = 4;
  const Problem p = make_problem(s, 17);
  // The slowest rank's second run (the first warms up), in seconds.
  auto seconds_per_run = [&](Method method, int machines, double latency_us) {
    ContextOptions opts = context_options();
    opts.emulated_link.latency_us = latency_us;
    const PlanOptions o = options_for(method, CommMode::kOneSided);
    std::vector<double> seconds(4, 0.0);
    run_cpu_ranks(4, machines, opts, [&](RankContext& ctx) {
      auto layer = SpAttention::create(ctx, make_request(s, o));
      const std::vector<int64_t> pos = positions_of(layer->local_tokens());
      const Tensor q = gather_rows(p.q, s, s.heads, pos);
      const Tensor k = gather_rows(p.k, s, s.kv_heads, pos);
      const Tensor v = gather_rows(p.v, s, s.kv_heads, pos);
      const Tensor out = poisoned(s, int64_t(pos.size()));
      const Stream stream = Stream::cpu();
      layer->run(q, k, v, out, stream);  // warm-up
      const auto start = std::chrono::steady_clock::now();
      layer->run(q, k, v, out, stream);
      seconds[ctx.rank] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Check check;
      compare(out, p, pos, check);
      EXPECT_LE(check.max_error, kF32Tolerance) << method_name(method);
    });
    return *std::max_element(seconds.begin(), seconds.end());
  };
  for (const auto& [method, machines] :
       {std::pair{Method::kRing, 2}, std::pair{Method::kUlysses, 2}, std::pair{Method::kTorus, 2},
        std::pair{Method::kTorus, 4}, std::pair{Method::kTas, 4}, std::pair{Method::kRing, 4}}) {
    const double without_latency = seconds_per_run(method, machines, 0.0);
    const double with_latency = seconds_per_run(method, machines, 2000.0);
    EXPECT_LT(with_latency - without_latency, 0.2)
        << method_name(method) << " one-sided on " << machines << " machines: " << with_latency
        << " s per run with a 2 ms link latency, " << without_latency << " s without";
  }
}

// Caller tensors may be strided (q, k, v slices of one fused [B, L, 3, H, D] projection; o a
// slice of a wider buffer), including tensors peers read one-sided (staged).
TEST(SpExecutor, StridedCallerTensors) {
  ScopedWaitTimeout timeout(20000);
  ShapeCase s;
  s.seq_len = 19;
  s.heads = 4;
  s.kv_heads = 4;
  s.causal = true;
  const Problem p = make_problem(s, 9);
  for (const PlanOptions& o :
       {options_for(Method::kUlysses), options_for(Method::kTas, CommMode::kOneSided),
        options_for(Method::kRing, CommMode::kOneSided)}) {
    std::vector<Check> checks(4);
    run_cpu_ranks(4, 2, context_options(), [&](RankContext& ctx) {
      auto layer = SpAttention::create(ctx, make_request(s, o));
      const std::vector<int64_t> pos = positions_of(layer->local_tokens());
      const int64_t rows = int64_t(pos.size());
      const int64_t H = s.heads, D = s.head_dim;
      std::vector<float> fused(size_t(rows * 3 * H * D));
      const Tensor q = gather_rows(p.q, s, s.heads, pos);
      const Tensor k = gather_rows(p.k, s, s.kv_heads, pos);
      const Tensor v = gather_rows(p.v, s, s.kv_heads, pos);
      for (int64_t i = 0; i < rows * H * D; ++i) {
        const int64_t row = i / (H * D), rest = i % (H * D);
        fused[size_t((row * 3 + 0) * H * D + rest)] = q.data_as<float>()[i];
        fused[size_t((row * 3 + 1) * H * D + rest)] = k.data_as<float>()[i];
        fused[size_t((row * 3 + 2) * H * D + rest)] = v.data_as<float>()[i];
      }
      auto slice = [&](int which) {
        return TensorView(fused.data() + which * H * D, DType::kF32, Device::cpu(), {1, rows, H, D},
                          {rows * 3 * H * D, 3 * H * D, D, 1});
      };
      std::vector<float> wide(size_t(rows * 2 * H * D), std::numeric_limits<float>::quiet_NaN());
      const TensorView o_view(wide.data(), DType::kF32, Device::cpu(), {1, rows, H, D},
                              {rows * 2 * H * D, 2 * H * D, D, 1});
      layer->run(slice(0), slice(1), slice(2), o_view, Stream::cpu());
      Tensor o = Tensor::empty({1, rows, H, D}, DType::kF32, Device::cpu());
      for (int64_t i = 0; i < rows * H * D; ++i) {
        o.data_as<float>()[i] = wide[size_t((i / (H * D)) * 2 * H * D + i % (H * D))];
      }
      compare(o, p, pos, checks[ctx.rank]);
    });
    for (const Check& c : checks) {
      EXPECT_EQ(c.unwritten, 0) << options_name(o);
      EXPECT_LE(c.max_error, kF32Tolerance) << options_name(o);
    }
  }
}

// The strided copy and the contiguous runs of a region (what packing and per-run one-sided
// transfers use), on head subsets of [B, rows, heads, D] planes and row subsets of an lse plane.
TEST(SpExecutor, StridedCopyAndRuns) {
  using detail::Geometry;
  const int64_t B = 2, R = 5, H = 6, D = 3;
  std::vector<float> src(size_t(B * R * H * D)), dst(src.size(), -1.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i);
  const Geometry plane = Geometry::contiguous(DType::kF32, {B, R, H, D});
  // Rows [1, 4) x heads [2, 5): 2 x 3 runs of 3 heads x D elements.
  const Geometry region = plane.slice(1, 1, 3).slice(2, 2, 3);
  EXPECT_FALSE(region.is_contiguous());
  std::vector<std::pair<int64_t, int64_t>> runs;
  region.for_each_run([&](int64_t off, int64_t n) { runs.push_back({off, n}); });
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs[0], std::make_pair(int64_t((1 * H + 2) * D), int64_t(3 * D)));
  EXPECT_EQ(runs[3], std::make_pair(int64_t(((R + 1) * H + 2) * D), int64_t(3 * D)));
  // Pack into a contiguous buffer, unpack into another plane: the region round-trips, the
  // rest of the destination stays untouched.
  std::vector<float> packed(size_t(region.numel()));
  const Geometry packed_geometry = Geometry::contiguous(DType::kF32, {B, 3, 3, D});
  detail::copy_strided(packed_geometry.view(packed.data(), Device::cpu()),
                       region.view(src.data(), Device::cpu()), Stream::cpu());
  size_t k = 0;
  region.for_each_run([&](int64_t off, int64_t n) {
    for (int64_t i = 0; i < n; ++i, ++k) EXPECT_EQ(packed[k], src[size_t(off + i)]);
  });
  detail::copy_strided(region.view(dst.data(), Device::cpu()),
                       packed_geometry.view(packed.data(), Device::cpu()), Stream::cpu());
  int64_t written = 0;
  for (size_t i = 0; i < dst.size(); ++i) {
    if (dst[i] != -1.0f) {
      EXPECT_EQ(dst[i], src[i]);
      ++written;
    }
  }
  EXPECT_EQ(written, region.numel());
  // An lse plane [B, heads, rows]: rows [1, 4) of heads [0, 6) are runs of 3 per (b, head);
  // all rows of heads [2, 4) are one run per batch entry.
  const Geometry lse = Geometry::contiguous(DType::kF32, {B, H, R});
  int n = 0;
  lse.slice(2, 1, 3).for_each_run([&](int64_t, int64_t count) { n += count == 3; });
  EXPECT_EQ(n, B * H);
  n = 0;
  lse.slice(1, 2, 2).for_each_run([&](int64_t, int64_t count) { n += count == 2 * R; });
  EXPECT_EQ(n, B);
}

// ---- arguments -------------------------------------------------------------------------------

TEST(SpExecutor, ChecksArgumentsNamingThem) {
  ScopedWaitTimeout timeout(10000);
  ShapeCase s;
  s.seq_len = 10;
  s.joint = 2;
  s.heads = 4;
  s.kv_heads = 2;
  run_cpu_ranks(2, 1, context_options(), [&](RankContext& ctx) {
    auto layer = SpAttention::create(ctx, make_request(s, options_for(Method::kRing)));
    const int64_t rows = layer->local_rows();
    EXPECT_EQ(rows, 5);
    auto make = [&](int64_t r, int heads, DType dtype = DType::kF32) {
      return Tensor::empty({1, r, heads, 8}, dtype, Device::cpu());
    };
    const Tensor q = make(rows, 4), k = make(rows, 2), v = make(rows, 2), o = make(rows, 4);
    const Tensor jq = make(2, 4), jk = make(2, 2), jv = make(2, 2), jo = make(2, 4);
    const Stream st = Stream::cpu();
    // Every check fails before any communication, identically on both ranks.
    expect_error([&] { layer->run(make(rows + 1, 4), k, v, o, jq, jk, jv, jo, st); },
                 ErrorCode::kInvalidArgument, {"q = ", "expected [1, 5, 4, 8]", "L_r"});
    expect_error([&] { layer->run(q, make(rows, 4), v, o, jq, jk, jv, jo, st); },
                 ErrorCode::kInvalidArgument, {"k = ", "expected [1, 5, 2, 8]"});
    expect_error([&] { layer->run(q, k, make(rows, 2, DType::kBF16), o, jq, jk, jv, jo, st); },
                 ErrorCode::kInvalidArgument, {"v has dtype bf16", "expected f32"});
    expect_error([&] { layer->run(q, k, v, o, st); }, ErrorCode::kInvalidArgument,
                 {"joint_q = (empty)", "expected [1, 2, 4, 8]"});
    expect_error([&] { layer->run(q, k, v, o, jq, jk, jv, make(3, 4), st); },
                 ErrorCode::kInvalidArgument, {"joint_o = ", "expected [1, 2, 4, 8]", "J"});
    expect_error([&] { layer->set_softmax_scale(-1.0f); }, ErrorCode::kInvalidArgument,
                 {"softmax_scale = -1"});
    EXPECT_FLOAT_EQ(layer->softmax_scale(), 1.0f / std::sqrt(8.0f));
  });
  // A bad request names its field; a method that cannot plan says why.
  run_cpu_ranks(2, 1, context_options(), [&](RankContext& ctx) {
    ShapeCase bad = s;
    bad.kv_heads = 3;
    expect_error([&] { SpAttention::create(ctx, make_request(bad, options_for(Method::kRing))); },
                 ErrorCode::kInvalidArgument, {"kv_heads = 3"});
    ShapeCase few = s;
    few.heads = few.kv_heads = 1;
    expect_error(
        [&] { SpAttention::create(ctx, make_request(few, options_for(Method::kUlysses))); },
        ErrorCode::kUnsupported, {"exceeds heads = 1"});
    SpAttentionOptions opts;
    opts.softmax_scale = 0.0f;
    expect_error(
        [&] { SpAttention::create(ctx, make_request(s, options_for(Method::kRing)), opts); },
        ErrorCode::kInvalidArgument, {"softmax_scale = 0"});
  });
  // One-sided plans need the symmetric heap.
  ContextOptions no_heap = context_options();
  no_heap.create_heap = false;
  run_cpu_ranks(2, 1, no_heap, [&](RankContext& ctx) {
    expect_error(
        [&] {
          SpAttention::create(ctx,
                              make_request(s, options_for(Method::kRing, CommMode::kOneSided)));
        },
        ErrorCode::kInvalidArgument, {"no symmetric heap", "create_heap"});
  });
}

// ---- the issue order -------------------------------------------------------------------------

// A plan whose index order deadlocks when each rank issues it on one thread: each rank first
// receives on one stream what the other sends, later in its index order, on another stream.
// The schedule issues the sends first. Also a put with a signal and a wait for it.
Plan crossed_plan() {
  Plan plan;
  plan.method = "crossed";
  plan.world_size = 2;
  plan.num_streams = 3;
  plan.shape.batch = 1;
  plan.shape.seq_len = 2;
  plan.shape.heads = 2;
  plan.shape.kv_heads = 2;
  plan.shape.head_dim = 4;
  plan.shape.dtype = DType::kF32;
  plan.machine_of_rank = {0, 0};
  plan.links = {LinkClass::kSelf, LinkClass::kPCIe, LinkClass::kPCIe, LinkClass::kSelf};
  plan.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    RankPlan& rp = plan.ranks[r];
    rp.slots = {{"q", SlotKind::kQ, SlotBinding::kInputQ, 1, 2},
                {"kv", SlotKind::kKV, SlotBinding::kInputKV, 1, 2},
                {"o", SlotKind::kO, SlotBinding::kOutput, 1, 2},
                {"box", SlotKind::kQ, SlotBinding::kWorkspace, 1, 2}};
    rp.num_signals = 1;
  }
  // Transfer 0: q head 0 of rank 0 -> o head 0 of rank 1 (stream 1).
  // Transfer 1: q head 0 of rank 1 -> o head 0 of rank 0 (stream 2).
  auto transfer = [](int id, int src, int dst, int slot_src, int slot_dst, int head) {
    Transfer t;
    t.id = id;
    t.src_rank = src;
    t.dst_rank = dst;
    t.src = {slot_src, {0, 1, head, 1}};
    t.dst = {slot_dst, {0, 1, head, 1}};
    t.link = LinkClass::kPCIe;
    t.bytes = 16;
    return t;
  };
  const Transfer t0 = transfer(0, 0, 1, 0, 2, 0);
  const Transfer t1 = transfer(1, 1, 0, 0, 2, 0);
  auto step = [](StepKind kind, int stream, std::vector<Transfer> ts) {
    Step s;
    s.kind = kind;
    s.stream = stream;
    s.transfers = std::move(ts);
    return s;
  };
  // Rank 0: receive t1 (stream 2) before sending t0 (stream 1); rank 1: receive t0 (stream 1)
  // before sending t1 (stream 2).
  plan.ranks[0].steps.push_back(step(StepKind::kSendRecv, 2, {t1}));
  plan.ranks[0].steps.push_back(step(StepKind::kSendRecv, 1, {t0}));
  plan.ranks[1].steps.push_back(step(StepKind::kSendRecv, 1, {t0}));
  plan.ranks[1].steps.push_back(step(StepKind::kSendRecv, 2, {t1}));
  // Transfer 2: rank 0 puts q head 1 into rank 1's box head 1 and raises signal 0 there;
  // rank 1 waits for it, then moves box head 1 into its o head 1 (a local put).
  Step put = step(StepKind::kPut, 1, {transfer(2, 0, 1, 0, 3, 1)});
  put.signal_id = 0;
  put.deps = {1};
  plan.ranks[0].steps.push_back(put);
  Step wait;
  wait.kind = StepKind::kWait;
  wait.stream = 1;
  wait.signal_id = 0;
  wait.signal_value = 1;
  plan.ranks[1].steps.push_back(wait);
  Step local = step(StepKind::kPut, 1, {transfer(3, 1, 1, 3, 2, 1)});
  plan.ranks[1].steps.push_back(local);
  // Rank 0's own o head 1: its q head 1, locally.
  plan.ranks[0].steps.push_back(step(StepKind::kPut, 1, {transfer(4, 0, 0, 0, 2, 1)}));
  return plan;
}

TEST(SpExecutor, IssueOrderCannotDeadlock) {
  ScopedWaitTimeout timeout(5000);
  const Plan plan = crossed_plan();
  const auto order = detail::schedule_plan(plan);
  ASSERT_EQ(order.size(), 2u);
  // Rank 0 posts its send (step 1) before it blocks in its receive (step 0); rank 1 may then
  // receive first.
  auto index_of = [&](int r, int step, bool end) {
    for (size_t i = 0; i < order[r].size(); ++i) {
      if (order[r][i].step == step && order[r][i].end == end) return int(i);
    }
    return -1;
  };
  EXPECT_LT(index_of(0, 1, false), index_of(0, 0, true));
  EXPECT_GE(index_of(1, 0, true), 0);
  // Run it: o head 0 holds the peer's q head 0, o head 1 the q head 1 of rank 0.
  std::vector<std::vector<float>> outs(2);
  run_cpu_ranks(2, 1, context_options(), [&](RankContext& ctx) {
    detail::PlanExecutor exec(ctx, plan, 1.0f);
    std::vector<float> q(8), k(8, 0.0f), v(8, 0.0f), o(8, -1.0f);
    for (int i = 0; i < 8; ++i) q[i] = float(100 * ctx.rank + i);
    auto view = [](std::vector<float>& x) {
      return TensorView(x.data(), DType::kF32, Device::cpu(), {1, 1, 2, 4});
    };
    detail::RunTensors io;
    io.q = view(q);
    io.k = view(k);
    io.v = view(v);
    io.o = view(o);
    for (int rep = 0; rep < 2; ++rep) exec.run(io, Stream::cpu());
    outs[ctx.rank] = o;
  });
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(outs[0][i], float(100 + i));    // rank 1's q head 0
    EXPECT_EQ(outs[1][i], float(i));          // rank 0's q head 0
    EXPECT_EQ(outs[0][4 + i], float(4 + i));  // its own q head 1
    EXPECT_EQ(outs[1][4 + i], float(4 + i));  // rank 0's q head 1, through box
  }
}

}  // namespace
}  // namespace tessera::sp
