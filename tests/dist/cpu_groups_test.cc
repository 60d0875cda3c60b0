// Sub-groups on the cpu backend: split(color, key) ordering, split_groups with the
// contiguous (Ulysses-like) and strided (Ring-like) layouts, collectives inside sub-groups,
// and the errors every rank must report for bad group lists.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "dist/cpu_dist_util.h"
#include "tessera/comm/context.h"

namespace tessera {
namespace {

using testing::all_layouts;
using testing::encode;
using testing::expect_error;
using testing::Layout;
using testing::layout_name;
using testing::test_options;

TEST(CpuGroups, SplitOrdersByKeyThenRank) {
  run_cpu_ranks(6, 2, test_options(false), [](RankContext& ctx) {
    // Colors: even / odd ranks; keys reverse the order inside each color. Rank 5 opts out.
    const int color = ctx.rank == 5 ? -1 : ctx.rank % 2;
    auto sub = ctx.world->split(color, -ctx.rank, "parity");
    if (ctx.rank == 5) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_NE(sub, nullptr);
    std::vector<int> expect = color == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
    ASSERT_EQ(sub->size(), int(expect.size()));
    for (int i = 0; i < sub->size(); ++i) EXPECT_EQ(sub->global_rank(i), expect[i]);
    EXPECT_EQ(sub->global_rank(sub->rank()), ctx.rank);
    EXPECT_EQ(sub->name(), "parity");
    EXPECT_EQ(sub->backend(), Backend::kCpu);
    // A collective inside the sub-group only involves its members.
    std::vector<int64_t> mine{ctx.rank}, all(sub->size());
    sub->all_gather(TensorView(mine.data(), DType::kI64, Device::cpu(), {1}),
                    TensorView(all.data(), DType::kI64, Device::cpu(), {sub->size()}), ctx.stream);
    for (int i = 0; i < sub->size(); ++i) EXPECT_EQ(all[i], expect[i]);
  });
}

// Every layout: Ulysses-like groups inside machines and Ring-like groups across them, each
// checked with a bit-exact all_gather of (world rank, index) blocks.
TEST(CpuGroups, ContiguousAndStridedGroupsMatchTopology) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      const int per_machine = ctx.size / l.machines;
      auto inner = ctx.world->split_groups(contiguous_groups(ctx.size, per_machine), "ulysses");
      auto across = ctx.world->split_groups(strided_groups(ctx.size, l.machines), "ring");
      ASSERT_NE(inner, nullptr);
      ASSERT_NE(across, nullptr);
      EXPECT_EQ(inner->size(), per_machine);
      EXPECT_EQ(across->size(), l.machines);
      for (int i = 0; i < inner->size(); ++i) {
        EXPECT_EQ(ctx.topology.machine_of_rank[inner->global_rank(i)],
                  ctx.topology.machine_of_rank[ctx.rank]);
      }
      for (int i = 0; i < across->size(); ++i) {
        EXPECT_EQ(ctx.topology.machine_of_rank[across->global_rank(i)], i);
        EXPECT_EQ(ctx.topology.local_rank[across->global_rank(i)],
                  ctx.topology.local_rank[ctx.rank]);
      }
      std::string inner_name = "ulysses[";
      for (int i = 0; i < inner->size(); ++i)
        inner_name += str(i ? "," : "", inner->global_rank(i));
      EXPECT_EQ(inner->name(), inner_name + "]");

      for (Communicator* g : {inner.get(), across.get()}) {
        std::vector<uint64_t> send(3), recv(3 * g->size());
        for (int i = 0; i < 3; ++i) send[i] = encode(ctx.rank, i);
        g->all_gather(TensorView(send.data(), DType::kU64, Device::cpu(), {3}),
                      TensorView(recv.data(), DType::kU64, Device::cpu(), {3 * g->size()}),
                      ctx.stream);
        int wrong = 0;
        for (int r = 0; r < g->size(); ++r) {
          for (int i = 0; i < 3; ++i) wrong += recv[3 * r + i] != encode(g->global_rank(r), i);
        }
        EXPECT_EQ(wrong, 0) << g->name() << " rank " << g->rank();
      }
    });
  }
}

TEST(CpuGroups, RanksOutsideEveryGroupGetNull) {
  run_cpu_ranks(4, 1, test_options(false), [](RankContext& ctx) {
    auto g = ctx.world->split_groups({{3, 1}}, "pair");
    if (ctx.rank == 1 || ctx.rank == 3) {
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->size(), 2);
      EXPECT_EQ(g->global_rank(0), 3);  // order of the list, not of the ranks
      EXPECT_EQ(g->name(), "pair[3,1]");
    } else {
      EXPECT_EQ(g, nullptr);
    }
  });
}

TEST(CpuGroups, BadGroupListsFailOnEveryRank) {
  std::atomic<int> failures{0};
  run_cpu_ranks(6, 2, test_options(false), [&](RankContext& ctx) {
    expect_error([&] { ctx.world->split_groups(contiguous_groups(ctx.size, 4, "--ulysses"), "u"); },
                 ErrorCode::kInvalidArgument, {"--ulysses = 4", "world_size = 6"});
    expect_error([&] { ctx.world->split_groups(strided_groups(ctx.size, 0), "r"); },
                 ErrorCode::kInvalidArgument, {"group_size = 0"});
    expect_error(
        [&] {
          ctx.world->split_groups({{0, 1}, {2, 6}}, "x");
        },
        ErrorCode::kInvalidArgument, {"holds rank 6", "expected ranks 0..5"});
    expect_error(
        [&] {
          ctx.world->split_groups({{0, 1}, {1, 2}}, "x");
        },
        ErrorCode::kInvalidArgument, {"rank 1 is repeated", "groups[0] and groups[1]"});
    expect_error(
        [&] {
          ctx.world->split_groups({{0}, {}}, "x");
        },
        ErrorCode::kInvalidArgument, {"groups[1] is empty"});
    // Ranks that disagree on the list: every rank notices, not only the odd one.
    std::vector<std::vector<int>> groups = {{0, 1, 2}, {3, 4, 5}};
    if (ctx.rank == 4) groups = {{0, 1, 2}, {3, 5}, {4}};
    try {
      ctx.world->split_groups(groups, "disagree");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("ranks passed different groups"), std::string::npos)
          << e.what();
      ++failures;
    }
    // The communicator still works afterwards.
    ctx.world->barrier(ctx.stream);
  });
  EXPECT_EQ(failures.load(), 6);
}

TEST(CpuGroups, NestedSplitsKeepWorldRanks) {
  run_cpu_ranks(8, 2, test_options(false), [](RankContext& ctx) {
    auto machine = ctx.world->split_groups(contiguous_groups(8, 4), "machine");
    ASSERT_NE(machine, nullptr);
    auto pair = machine->split_groups(contiguous_groups(4, 2), "pair");
    ASSERT_NE(pair, nullptr);
    EXPECT_EQ(pair->size(), 2);
    EXPECT_EQ(pair->global_rank(pair->rank()), ctx.rank);
    EXPECT_EQ(pair->global_rank(0), ctx.rank / 2 * 2);
    std::vector<int32_t> v{ctx.rank}, sum(1);
    pair->all_reduce(TensorView(v.data(), DType::kI32, Device::cpu(), {1}),
                     TensorView(sum.data(), DType::kI32, Device::cpu(), {1}), ReduceOp::kSum,
                     ctx.stream);
    EXPECT_EQ(sum[0], (ctx.rank / 2 * 2) * 2 + 1);
  });
}

}  // namespace
}  // namespace tessera
