// Point-to-point on the cpu communicator: buffered sends (a ring where every rank sends
// before it receives), NCCL-style groups (recv issued before send), message order, and the
// errors of mismatched sizes.
#include <gtest/gtest.h>

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

TEST(CpuP2P, RingExchangeSendThenRecvDoesNotDeadlock) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      const int n = ctx.size;
      const int right = (ctx.rank + 1) % n;
      const int left = (ctx.rank + n - 1) % n;
      std::vector<uint64_t> chunk(11), incoming(11);
      for (int64_t i = 0; i < 11; ++i) chunk[i] = encode(ctx.rank, i);
      // n - 1 ring steps: afterwards every rank has seen every other rank's chunk once.
      int wrong = 0;
      for (int step = 1; step < n; ++step) {
        ctx.world->send(TensorView(chunk.data(), DType::kU64, Device::cpu(), {11}), right,
                        ctx.stream);
        ctx.world->recv(TensorView(incoming.data(), DType::kU64, Device::cpu(), {11}), left,
                        ctx.stream);
        const int origin = (ctx.rank - step + n) % n;
        for (int64_t i = 0; i < 11; ++i) wrong += incoming[i] != encode(origin, i);
        chunk = incoming;
      }
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
  }
}

TEST(CpuP2P, GroupedRecvBeforeSendCompletes) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      const int n = ctx.size;
      // Every rank exchanges with every rank (itself included) in one group, recvs first.
      std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(3)),
          in(n, std::vector<int32_t>(3, -1));
      ctx.world->group_begin();
      for (int p = 0; p < n; ++p) {
        ctx.world->recv(TensorView(in[p].data(), DType::kI32, Device::cpu(), {3}), p, ctx.stream);
      }
      for (int p = 0; p < n; ++p) {
        for (int i = 0; i < 3; ++i) out[p][i] = ctx.rank * 10000 + p * 100 + i;
        ctx.world->send(TensorView(out[p].data(), DType::kI32, Device::cpu(), {3}), p, ctx.stream);
      }
      ctx.world->group_end();
      int wrong = 0;
      for (int p = 0; p < n; ++p) {
        for (int i = 0; i < 3; ++i) wrong += in[p][i] != p * 10000 + ctx.rank * 100 + i;
      }
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
  }
}

TEST(CpuP2P, MessagesFromOnePeerArriveInOrder) {
  run_cpu_ranks(2, 2, test_options(false), [](RankContext& ctx) {
    std::vector<int64_t> v(1);
    if (ctx.rank == 0) {
      for (int64_t k = 0; k < 50; ++k) {
        v[0] = k;
        ctx.world->send(TensorView(v.data(), DType::kI64, Device::cpu(), {1}), 1, ctx.stream);
      }
    } else {
      for (int64_t k = 0; k < 50; ++k) {
        ctx.world->recv(TensorView(v.data(), DType::kI64, Device::cpu(), {1}), 0, ctx.stream);
        EXPECT_EQ(v[0], k);
      }
    }
  });
}

TEST(CpuP2P, SizeOrDtypeMismatchIsAnError) {
  run_cpu_ranks(2, 1, test_options(false), [](RankContext& ctx) {
    std::vector<float> v(8, 1.0f);
    if (ctx.rank == 0) {
      ctx.world->send(TensorView(v.data(), DType::kF32, Device::cpu(), {8}), 1, ctx.stream);
      ctx.world->send(TensorView(v.data(), DType::kF32, Device::cpu(), {4}), 1, ctx.stream);
    } else {
      expect_error(
          [&] {
            ctx.world->recv(TensorView(v.data(), DType::kF32, Device::cpu(), {4}), 0, ctx.stream);
          },
          ErrorCode::kInvalidArgument, {"recv #1 from rank 0", "sent 8 f32 elements"});
      expect_error(
          [&] {
            ctx.world->recv(TensorView(v.data(), DType::kI32, Device::cpu(), {4}), 0, ctx.stream);
          },
          ErrorCode::kInvalidArgument, {"recv #2 from rank 0", "sent 4 f32 elements", "i32[4]"});
    }
    expect_error(
        [&] {
          ctx.world->send(TensorView(v.data(), DType::kF32, Device::cpu(), {4}), 2, ctx.stream);
        },
        ErrorCode::kInvalidArgument, {"send: peer = 2", "expected 0..1"});
    expect_error([&] { ctx.world->group_end(); }, ErrorCode::kInvalidArgument,
                 {"without a matching group_begin"});
    // A strided view is refused before anything moves.
    TensorView strided(v.data(), DType::kF32, Device::cpu(), {4}, {2});
    expect_error([&] { ctx.world->send(strided, 1 - ctx.rank, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"send data", "expected contiguous"});
  });
}

}  // namespace
}  // namespace tessera
