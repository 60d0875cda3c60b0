// Group layouts of the sequence-parallel methods (contiguous / strided), their argument
// errors, reduce-op and wait-comparison names, and split_groups on a single cpu rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/context.h"
#include "tessera/comm/symmetric_heap.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

using Groups = std::vector<std::vector<int>>;

template <typename Fn>
std::string error_of(Fn&& fn, ErrorCode expected_code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected_code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(CommGroups, ContiguousGroupsAreConsecutiveRanks) {
  EXPECT_EQ(contiguous_groups(8, 4), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(contiguous_groups(6, 2), (Groups{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(contiguous_groups(3, 1), (Groups{{0}, {1}, {2}}));
  EXPECT_EQ(contiguous_groups(5, 5), (Groups{{0, 1, 2, 3, 4}}));
}

TEST(CommGroups, StridedGroupsTakeEveryWOverGthRank) {
  EXPECT_EQ(strided_groups(8, 2), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(strided_groups(8, 4), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(strided_groups(6, 3), (Groups{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_EQ(strided_groups(4, 1), (Groups{{0}, {1}, {2}, {3}}));
  // Contiguous x strided of the same world cover every (machine, local rank) pair once.
  auto inner = contiguous_groups(12, 4);
  auto across = strided_groups(12, 3);
  for (int r = 0; r < 12; ++r) {
    EXPECT_EQ(inner[r / 4][r % 4], r);
    EXPECT_EQ(across[r % 4][r / 4], r);
  }
}

TEST(CommGroups, LayoutErrorsNameTheArgument) {
  std::string m =
      error_of([] { contiguous_groups(6, 4, "--ulysses-degree"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("--ulysses-degree = 4"), std::string::npos) << m;
  EXPECT_NE(m.find("world_size = 6"), std::string::npos) << m;
  m = error_of([] { strided_groups(8, 3); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("group_size = 3"), std::string::npos) << m;
  m = error_of([] { strided_groups(8, 0, "ring"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("ring = 0: expected >= 1"), std::string::npos) << m;
  m = error_of([] { contiguous_groups(0, 1); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("world_size = 0"), std::string::npos) << m;
}

TEST(CommGroups, OpNames) {
  EXPECT_STREQ(reduce_op_name(ReduceOp::kSum), "sum");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kMax), "max");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kMin), "min");
  EXPECT_STREQ(wait_cmp_name(WaitCmp::kEq), "==");
  EXPECT_STREQ(wait_cmp_name(WaitCmp::kNe), "!=");
  EXPECT_STREQ(wait_cmp_name(WaitCmp::kGe), ">=");
  EXPECT_STREQ(wait_cmp_name(WaitCmp::kGt), ">");
}

TEST(CommGroups, SplitGroupsOnOneRank) {
  ContextOptions options;
  options.create_heap = false;
  run_cpu_ranks(1, 1, options, [](RankContext& ctx) {
    EXPECT_EQ(ctx.world->name(), "world");
    EXPECT_EQ(ctx.world->size(), 1);
    EXPECT_EQ(ctx.heap, nullptr);
    auto g = ctx.world->split_groups({{0}}, "solo");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size(), 1);
    EXPECT_EQ(g->name(), "solo[0]");
    EXPECT_EQ(ctx.world->split_groups({}, "none"), nullptr);
    std::string m =
        error_of([&] { ctx.world->split_groups({{1}}, "bad"); }, ErrorCode::kInvalidArgument);
    EXPECT_NE(m.find("holds rank 1: expected ranks 0..0"), std::string::npos) << m;
    m = error_of([&] { ctx.world->global_rank(1); }, ErrorCode::kInvalidArgument);
    EXPECT_NE(m.find("global_rank(1)"), std::string::npos) << m;
  });
}

TEST(CommGroups, RunCpuRanksValidatesItsArguments) {
  ContextOptions options;
  std::string m = error_of([&] { run_cpu_ranks(6, 4, options, [](RankContext&) {}); },
                           ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("num_machines = 4"), std::string::npos) << m;
  m = error_of([&] { run_cpu_ranks(0, 1, options, [](RankContext&) {}); },
               ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("world_size = 0"), std::string::npos) << m;
}

}  // namespace
}  // namespace tessera
