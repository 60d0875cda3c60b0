// Determinism on the cpu backend: every sequence-parallel method (two- and one-sided, and
// auto) gives bitwise identical outputs, image and joint, on every rank, from run to run: a
// second run of the same layer and a run of a freshly created layer in a new set of rank
// threads. Thread timing differs between the runs (the ranks race), so this checks that no
// result depends on which rank or message comes first: reductions and merges happen in
// plan order, never in arrival order.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dist/cpu_dist_util.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::sp {
namespace {

using tessera::testing::ScopedWaitTimeout;

struct Layout {
  int ranks;
  int machines;
};

PlanRequest request_for(Method method, CommMode comm, DType dtype) {
  PlanRequest r;
  r.seq_len = 45;
  r.joint_tokens = 3;
  r.heads = 8;
  r.kv_heads = 2;
  r.head_dim = 16;
  r.causal = true;
  r.dtype = dtype;
  r.options.method = method;
  r.options.comm = comm;
  return r;
}

ContextOptions context_options() {
  ContextOptions o;
  o.heap_bytes = size_t(1) << 22;
  o.emulated_link.bandwidth_gbps = 1e6;
  o.emulated_link.latency_us = 0.0;
  o.emulated_link.preset = "custom";
  return o;
}

Tensor random_input(const std::vector<int64_t>& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.view().numel(); ++i) store_from_float(t.data(), dtype, i, dist(rng));
  return t;
}

std::vector<std::byte> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::byte*>(t.data());
  return std::vector<std::byte>(p, p + t.view().span_bytes());
}

// Per rank: the bytes of o then joint_o, for `runs` runs of one layer.
using RankOutputs = std::vector<std::vector<std::vector<std::byte>>>;  // [rank][run]

// Creates the layer on every rank and runs it `runs` times on the same inputs (seeded by rank).
void run_method(const PlanRequest& request, const Layout& layout, int runs, RankOutputs& out) {
  out.assign(size_t(layout.ranks), {});
  run_cpu_ranks(layout.ranks, layout.machines, context_options(), [&](RankContext& ctx) {
    auto layer = SpAttention::create(ctx, request);
    const AttentionShape& s = layer->shape();
    const int64_t rows = layer->local_rows(), J = s.joint_tokens;
    const uint32_t seed = 100 * uint32_t(ctx.rank);
    const Tensor q = random_input({s.batch, rows, s.heads, s.head_dim}, s.dtype, seed + 1);
    const Tensor k = random_input({s.batch, rows, s.kv_heads, s.head_dim}, s.dtype, seed + 2);
    const Tensor v = random_input({s.batch, rows, s.kv_heads, s.head_dim}, s.dtype, seed + 3);
    // Joint tokens are replicated: the same on every rank.
    const Tensor jq = random_input({s.batch, J, s.heads, s.head_dim}, s.dtype, 7001);
    const Tensor jk = random_input({s.batch, J, s.kv_heads, s.head_dim}, s.dtype, 7002);
    const Tensor jv = random_input({s.batch, J, s.kv_heads, s.head_dim}, s.dtype, 7003);
    for (int run = 0; run < runs; ++run) {
      // Different garbage in the outputs before each run: a value left unwritten shows.
      Tensor o = random_input({s.batch, rows, s.heads, s.head_dim}, s.dtype, 9000 + run);
      Tensor jo = random_input({s.batch, J, s.heads, s.head_dim}, s.dtype, 9100 + run);
      layer->run(q, k, v, o, jq, jk, jv, jo, Stream::cpu());
      std::vector<std::byte> all = bytes_of(o);
      const std::vector<std::byte> joint = bytes_of(jo);
      all.insert(all.end(), joint.begin(), joint.end());
      out[size_t(ctx.rank)].push_back(std::move(all));
    }
  });
}

void expect_bitwise_equal(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << what << ": outputs differ";
}

struct MethodCase {
  Method method;
  CommMode comm;
};

// Every method in every form it has: two- and one-sided, except Mesh (two-sided only) and
// auto (which picks among the others).
const MethodCase kMethods[] = {
    {Method::kRing, CommMode::kTwoSided},    {Method::kRing, CommMode::kOneSided},
    {Method::kUlysses, CommMode::kTwoSided}, {Method::kUlysses, CommMode::kOneSided},
    {Method::kUsp, CommMode::kTwoSided},     {Method::kUsp, CommMode::kOneSided},
    {Method::kTas, CommMode::kTwoSided},     {Method::kTas, CommMode::kOneSided},
    {Method::kTorus, CommMode::kTwoSided},   {Method::kTorus, CommMode::kOneSided},
    {Method::kMesh, CommMode::kTwoSided},    {Method::kAuto, CommMode::kTwoSided}};

void check_method(const MethodCase& m, DType dtype, const Layout& layout) {
  const PlanRequest request = request_for(m.method, m.comm, dtype);
  const std::string what =
      str(method_name(m.method), " ", comm_mode_name(m.comm), " ", dtype_name(dtype), " on ",
          layout.ranks, " ranks x ", layout.machines, " machines");
  RankOutputs first, second;
  run_method(request, layout, 2, first);
  run_method(request, layout, 1, second);
  for (int r = 0; r < layout.ranks; ++r) {
    expect_bitwise_equal(first[size_t(r)][0], first[size_t(r)][1],
                         str(what, ", rank ", r, ", second run of one layer"));
    expect_bitwise_equal(first[size_t(r)][0], second[size_t(r)][0],
                         str(what, ", rank ", r, ", a new layer in new rank threads"));
  }
}

TEST(SpDeterminism, EveryMethodIsBitwiseReproducible) {
  ScopedWaitTimeout timeout(20000);
  for (const Layout& layout : {Layout{4, 2}, Layout{8, 2}}) {
    for (const MethodCase& m : kMethods) check_method(m, DType::kBF16, layout);
  }
}

// f32 keeps every bit of the float32 merges (bf16 output rounding could hide a difference).
TEST(SpDeterminism, Float32OutputsAreBitwiseReproducible) {
  ScopedWaitTimeout timeout(20000);
  for (const MethodCase& m : kMethods) check_method(m, DType::kF32, {4, 2});
}

}  // namespace
}  // namespace tessera::sp
