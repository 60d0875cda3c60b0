// The plan IR's helpers: sharding, token layouts, slot geometry, byte counts, JSON; and the
// communication volumes the planners produce against the papers' formulas.
#include <gtest/gtest.h>

#include <set>

#include "tessera/core/error.h"
#include "tessera/sp/validator.h"
#include "unit/sp_test_util.h"

namespace tessera::sp {
namespace {

using testing::gpu_topology;
using testing::request;

TEST(SpPlan, ShardingGivesTheFirstRemainderPartsOneMore) {
  for (int64_t n : {0, 1, 5, 7, 64, 1001}) {
    for (int parts : {1, 2, 3, 8}) {
      int64_t total = 0;
      for (int i = 0; i < parts; ++i) {
        EXPECT_EQ(shard_begin(n, parts, i), total);
        EXPECT_EQ(shard_size(n, parts, i), n / parts + (i < n % parts ? 1 : 0));
        total += shard_size(n, parts, i);
      }
      EXPECT_EQ(total, n);
      EXPECT_EQ(shard_begin(n, parts, parts), n);
    }
  }
  EXPECT_THROW(shard_size(4, 0, 0), Error);
  EXPECT_THROW(shard_size(4, 2, 2), Error);
}

TEST(SpPlan, LayoutsPartitionTheImageTokens) {
  for (TokenLayout layout :
       {TokenLayout::kContiguous, TokenLayout::kStriped, TokenLayout::kZigzag}) {
    for (int P : {1, 2, 3, 4, 7}) {
      for (int64_t L : {1, 5, 13, 64}) {
        const int64_t J = 3;
        std::multiset<int64_t> seen;
        for (int r = 0; r < P; ++r) {
          int64_t rows = 0;
          for (const TokenRun& run : owned_image_tokens(layout, L, J, P, r)) {
            EXPECT_GT(run.count, 0);
            for (int64_t i = 0; i < run.count; ++i) seen.insert(run.at(i));
            rows += run.count;
          }
          if (layout != TokenLayout::kZigzag) EXPECT_EQ(rows, shard_size(L, P, r));
        }
        ASSERT_EQ(int64_t(seen.size()), L) << token_layout_name(layout);
        int64_t expect = J;
        for (int64_t t : seen) EXPECT_EQ(t, expect++);
      }
    }
  }
  // Striped: rank 1 of 4 owns 1, 5, 9 (offset by the joint tokens).
  const auto striped = owned_image_tokens(TokenLayout::kStriped, 10, 2, 4, 1);
  ASSERT_EQ(striped.size(), 1u);
  EXPECT_EQ(striped[0].start, 3);
  EXPECT_EQ(striped[0].stride, 4);
  EXPECT_EQ(striped[0].count, 3);
  // Zigzag: rank 0 of 2 owns shards 0 and 3 of 4.
  const auto zigzag = owned_image_tokens(TokenLayout::kZigzag, 8, 0, 2, 0);
  ASSERT_EQ(zigzag.size(), 2u);
  EXPECT_EQ(zigzag[0].start, 0);
  EXPECT_EQ(zigzag[1].start, 6);
  EXPECT_EQ(parse_token_layout("zigzag"), TokenLayout::kZigzag);
  EXPECT_THROW(parse_token_layout("spiral"), Error);
}

TEST(SpPlan, SlotGeometryForExecutors) {
  AttentionShape shape;
  shape.batch = 2;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 8;
  shape.dtype = DType::kBF16;
  const SlotDesc state{"state", SlotKind::kPartial, SlotBinding::kWorkspace, 5, 4};
  const auto planes = slot_planes(shape, state);
  ASSERT_EQ(planes.size(), 2u);
  EXPECT_EQ(planes[0].offset_bytes, 0);
  EXPECT_EQ(planes[1].offset_bytes, 2 * 5 * 4 * 8 * 4);
  EXPECT_EQ(slot_bytes(shape, state), 2 * 5 * 4 * 9 * 4);
  const Region region{1, 3, 2, 2};
  EXPECT_EQ(region_bytes(shape, SlotKind::kPartial, region), 2 * 3 * 2 * 9 * 4);
  const RegionCopy o = region_copy(shape, state, 0, region);
  EXPECT_EQ(o.inner_stride_bytes, 4 * 8 * 4);      // one row of 4 heads x 8 f32
  EXPECT_EQ(o.outer_stride_bytes, 5 * 4 * 8 * 4);  // one batch entry of 5 rows
  EXPECT_EQ(o.offset_bytes, 1 * o.inner_stride_bytes + 2 * 8 * 4);
  EXPECT_EQ(o.contiguous_bytes, 2 * 8 * 4);
  EXPECT_EQ(o.inner_count, 3);
  EXPECT_EQ(o.outer_count, 2);
  // lse [B, heads, rows]: a block is the region's 3 rows of one head.
  const RegionCopy lse = region_copy(shape, state, 1, region);
  EXPECT_EQ(lse.offset_bytes, planes[1].offset_bytes + 2 * 5 * 4 + 1 * 4);
  EXPECT_EQ(lse.contiguous_bytes, 3 * 4);
  EXPECT_EQ(lse.inner_count, 2);
  EXPECT_EQ(lse.inner_stride_bytes, 5 * 4);
  EXPECT_EQ(lse.outer_stride_bytes, 4 * 5 * 4);
  const SlotDesc kv{"kv", SlotKind::kKV, SlotBinding::kInputKV, 5, 2};
  EXPECT_EQ(slot_bytes(shape, kv), 2 * 2 * 5 * 2 * 8 * 2);
  EXPECT_THROW(region_copy(shape, kv, 2, region), Error);
  EXPECT_THROW(region_copy(shape, kv, 0, {4, 2, 0, 1}), Error);
}

TEST(SpPlan, JsonIsDeterministicAndComplete) {
  const Plan plan =
      make_plan(request(gpu_topology(1, 2), Method::kRing, 9, 4, 4, true, 2), CostModel());
  const std::string a = to_json(plan);
  const std::string b =
      to_json(make_plan(request(gpu_topology(1, 2), Method::kRing, 9, 4, 4, true, 2), CostModel()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.rfind("{\"method\":\"ring\"", 0), 0u) << a.substr(0, 80);
  for (const char* key : {"\"ranks\":", "\"slots\":", "\"steps\":", "\"transfers\":",
                          "\"kind\":\"compute\"", "\"kind\":\"sendrecv\"",
                          "\"positions\":", "\"binding\":\"joint_output\"", "\"causal\":true"}) {
    EXPECT_NE(a.find(key), std::string::npos) << key;
  }
  int depth = 0;
  for (char c : a) {
    depth += c == '{' || c == '[';
    depth -= c == '}' || c == ']';
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
}

TEST(SpPlan, RemotelyAccessedSlotsAreTheOneSidedOnes) {
  PlanRequest req = request(gpu_topology(1, 2), Method::kUlysses, 16, 4, 4, false, 0);
  EXPECT_TRUE(remotely_accessed_slots(plan_ulysses(req), 0).empty());  // two-sided
  req.options.comm = CommMode::kOneSided;
  const Plan plan = plan_ulysses(req);
  std::set<std::string> names;
  for (int slot : remotely_accessed_slots(plan, 1)) names.insert(plan.ranks[1].slots[slot].name);
  // Scatter-push lands in ua_q/ua_kv, O is pushed into the caller's output.
  EXPECT_EQ(names, (std::set<std::string>{"ua_q", "ua_kv", "o"}));
  req.options.method = Method::kRing;
  const Plan ring = plan_ring(req);
  names.clear();
  for (int slot : remotely_accessed_slots(ring, 1)) names.insert(ring.ranks[1].slots[slot].name);
  EXPECT_EQ(names, (std::set<std::string>{"kv"}));  // peers pull the caller's KV
  // Ring buffers hold the largest chunk; shards of 8 and 8 tokens here.
  for (int slot = 0; slot < int(ring.ranks[0].slots.size()); ++slot) {
    EXPECT_EQ(max_slot_bytes(ring, slot), slot_bytes(ring.shape, ring.ranks[0].slots[slot]));
  }
  EXPECT_THROW(max_slot_bytes(ring, 99), Error);
}

TEST(SpPlan, RingMovesEveryOtherKvChunkOnce) {
  // Two-sided transfers are listed by both sides but counted once.
  const PlanRequest req = request(gpu_topology(1, 4), Method::kRing, 10, 4, 2, false, 0);
  const Plan plan = plan_ring(req);
  const int64_t kv_token = 2 * req.batch * req.kv_heads * req.head_dim * 2;  // K and V, bf16
  for (int r = 0; r < 4; ++r) {
    const int64_t others = 10 - shard_size(10, 4, r);
    EXPECT_EQ(bytes_received(plan, r), others * kv_token) << r;
    EXPECT_EQ(bytes_sent(plan, r), (10 - shard_size(10, 4, (r + 1) % 4)) * kv_token) << r;
  }
}

TEST(SpPlan, UlyssesReplicatesKvHeadsForGqa) {
  // 8 query heads, 2 kv heads, 8 ranks: each rank has one query head, and kv head h / 4.
  const PlanRequest req = request(gpu_topology(1, 8), Method::kUlysses, 64, 8, 2, false, 0);
  const Plan plan = plan_ulysses(req);
  EXPECT_TRUE(validate_plan(plan).ok());
  const int64_t token_head = req.batch * req.head_dim * 2;  // one token, one head, bf16
  // In: Q (1 head) and K, V (1 kv head) of 56 other tokens; O (1 head) of own 8 tokens from 7.
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(bytes_received(plan, r), (56 * 3 + 8 * 7) * token_head) << r;
  }
}

TEST(SpPlan, TopologyAwareSpCrossesMachinesLessThanUsp) {
  // StreamFusion appendix D: with Pu >= N, TAS moves 4 (N-1)/N of one rank's Q, K, V, O
  // across machines; USP with Ulysses inside (Pu = M) rings the KV across: 2 (N-1)/N of the
  // KV of a Ulysses group. Equal at N = 2, TAS less beyond.
  for (int N : {2, 4}) {
    const int M = 2;
    const int P = N * M;
    const int64_t L = 16 * P;
    PlanRequest req = request(gpu_topology(N, M), Method::kTas, L, 8, 8, false, 0);
    const Plan tas = plan_tas(req);
    req.options.method = Method::kUsp;
    const Plan usp = plan_usp(req);
    EXPECT_EQ(tas.param("Pu"), std::to_string(P));  // gcd(P, 8)
    EXPECT_EQ(usp.param("Pu"), "2");
    const int64_t tensor = req.batch * (L / P) * req.heads * req.head_dim * 2;  // one rank's Q
    for (int r = 0; r < P; ++r) {
      const int64_t tas_cross = bytes_received(tas, r, LinkClass::kNetwork);
      const int64_t usp_cross = bytes_received(usp, r, LinkClass::kNetwork);
      EXPECT_EQ(tas_cross, 4 * tensor * (N - 1) / N) << "N " << N << " rank " << r;
      EXPECT_EQ(usp_cross, 2 * tensor * (N - 1)) << "N " << N << " rank " << r;
      if (N == 2) {
        EXPECT_EQ(tas_cross, usp_cross);
      } else {
        EXPECT_LT(tas_cross, usp_cross);
      }
    }
  }
}

TEST(SpPlan, TorusStagesFollowThePaper) {
  // 4 machines x 2 GPUs, 8 heads: Pu = 8 = T 4 x P'u 2, Pr = 1.
  PlanRequest req = request(gpu_topology(4, 2), Method::kTorus, 64, 8, 8, false, 0);
  for (CommMode comm : {CommMode::kTwoSided, CommMode::kOneSided}) {
    req.options.comm = comm;
    const Plan plan = plan_torus(req);
    EXPECT_EQ(plan.param("T"), "4");
    EXPECT_EQ(plan.param("Pr"), "1");
    ASSERT_TRUE(validate_plan(plan).ok());
    // Same bytes as TAS, cut into T - 1 cross-machine stages per tensor.
    req.options.method = Method::kTas;
    const Plan tas = plan_tas(req);
    req.options.method = Method::kTorus;
    int q_stages = 0, kv_stages = 0, o_stages = 0, barriers = 0;
    for (const Step& s : plan.ranks[0].steps) {
      if (is_comm_step(s.kind)) {
        q_stages += s.note.rfind("pull q stage", 0) == 0;
        kv_stages += s.note.rfind("pull kv stage", 0) == 0;
        o_stages += s.note.rfind("push o stage", 0) == 0;
      }
      barriers += s.kind == StepKind::kBarrier;
    }
    EXPECT_EQ(q_stages, 3);
    EXPECT_EQ(kv_stages, 3);
    EXPECT_EQ(o_stages, 3);
    // One-sided: only the two barriers over all ranks (start and end) the paper needs.
    EXPECT_EQ(barriers, comm == CommMode::kOneSided ? 2 : 0);
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(bytes_received(plan, r, LinkClass::kNetwork),
                bytes_received(tas, r, LinkClass::kNetwork));
    }
  }
}

}  // namespace
}  // namespace tessera::sp
