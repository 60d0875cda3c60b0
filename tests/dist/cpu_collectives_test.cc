// Collectives of the cpu communicator on 1..8 ranks in 1..4 machines: data movement is
// checked bit-exactly with inputs that encode (rank, index); reductions against a reference
// that combines ranks in rank order, and every rank's all_reduce must be bit-identical.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "dist/cpu_dist_util.h"
#include "tessera/comm/context.h"

namespace tessera {
namespace {

using testing::all_layouts;
using testing::encode;
using testing::Layout;
using testing::layout_name;
using testing::test_options;

TEST(CpuCollectives, AllToAllMovesBlockJToRankJ) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    const int64_t block = 5;  // odd on purpose
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      const int n = ctx.size;
      std::vector<uint64_t> send(n * block), recv(n * block, ~0ull);
      for (int64_t i = 0; i < n * block; ++i) send[i] = encode(ctx.rank, i);
      ctx.world->all_to_all(TensorView(send.data(), DType::kU64, Device::cpu(), {n, block}),
                            TensorView(recv.data(), DType::kU64, Device::cpu(), {n, block}),
                            ctx.stream);
      int wrong = 0;
      for (int j = 0; j < n; ++j) {
        for (int64_t e = 0; e < block; ++e) {
          wrong += recv[j * block + e] != encode(j, ctx.rank * block + e);
        }
      }
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
  }
}

TEST(CpuCollectives, AllGatherConcatenatesRankBlocks) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    const int64_t count = 7;
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      const int n = ctx.size;
      // bf16 bit patterns move untouched (a collective is a copy, not a conversion).
      std::vector<uint16_t> send(count), recv(n * count, 0xffff);
      for (int64_t i = 0; i < count; ++i) send[i] = uint16_t((ctx.rank << 8) | i);
      ctx.world->all_gather(TensorView(send.data(), DType::kBF16, Device::cpu(), {count}),
                            TensorView(recv.data(), DType::kBF16, Device::cpu(), {n, count}),
                            ctx.stream);
      int wrong = 0;
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < count; ++i) wrong += recv[r * count + i] != uint16_t((r << 8) | i);
      }
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
  }
}

TEST(CpuCollectives, InPlaceAllGatherAndAllToAll) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      const int n = ctx.size;
      const int64_t block = 3;
      // all_gather with send = this rank's block of recv.
      std::vector<int32_t> buf(n * block, -1);
      for (int64_t e = 0; e < block; ++e) buf[ctx.rank * block + e] = int32_t(ctx.rank * 100 + e);
      TensorView all(buf.data(), DType::kI32, Device::cpu(), {n * block});
      ctx.world->all_gather(all.flat(ctx.rank * block, block), all, ctx.stream);
      int wrong = 0;
      for (int r = 0; r < n; ++r) {
        for (int64_t e = 0; e < block; ++e) wrong += buf[r * block + e] != int32_t(r * 100 + e);
      }
      // all_to_all with send == recv.
      std::vector<uint64_t> a2a(n * block);
      for (int64_t i = 0; i < n * block; ++i) a2a[i] = encode(ctx.rank, i);
      TensorView v(a2a.data(), DType::kU64, Device::cpu(), {n * block});
      ctx.world->all_to_all(v, v, ctx.stream);
      for (int j = 0; j < n; ++j) {
        for (int64_t e = 0; e < block; ++e) {
          wrong += a2a[j * block + e] != encode(j, ctx.rank * block + e);
        }
      }
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
  }
}

TEST(CpuCollectives, IntegerReductionsAreExact) {
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      const int n = ctx.size;
      const int64_t block = 4;
      const int64_t total = n * block;
      // i64 near 2^40 so a float path would lose bits.
      std::vector<int64_t> send(total), out(block), full(total);
      for (int64_t i = 0; i < total; ++i) send[i] = (int64_t(1) << 40) + (ctx.rank + 1) * (i + 1);
      TensorView s(send.data(), DType::kI64, Device::cpu(), {total});
      struct Case {
        ReduceOp op;
        int64_t (*expect)(int n, int64_t i);
      };
      const Case cases[] = {
          {ReduceOp::kSum,
           [](int n, int64_t i) { return n * (int64_t(1) << 40) + (i + 1) * n * (n + 1) / 2; }},
          {ReduceOp::kMax, [](int n, int64_t i) { return (int64_t(1) << 40) + n * (i + 1); }},
          {ReduceOp::kMin, [](int, int64_t i) { return (int64_t(1) << 40) + (i + 1); }},
      };
      int wrong = 0;
      for (const Case& c : cases) {
        ctx.world->reduce_scatter(s, TensorView(out.data(), DType::kI64, Device::cpu(), {block}),
                                  c.op, ctx.stream);
        for (int64_t e = 0; e < block; ++e) wrong += out[e] != c.expect(n, ctx.rank * block + e);
        ctx.world->all_reduce(s, TensorView(full.data(), DType::kI64, Device::cpu(), {total}), c.op,
                              ctx.stream);
        for (int64_t i = 0; i < total; ++i) wrong += full[i] != c.expect(n, i);
      }
      // i32 sums wrap instead of overflowing; u64 max keeps the top bit.
      std::vector<int32_t> i32(1, 0x7fffffff), i32_out(1);
      ctx.world->all_reduce(TensorView(i32.data(), DType::kI32, Device::cpu(), {1}),
                            TensorView(i32_out.data(), DType::kI32, Device::cpu(), {1}),
                            ReduceOp::kSum, ctx.stream);
      wrong += i32_out[0] != int32_t(uint32_t(0x7fffffff) * uint32_t(n));
      std::vector<uint64_t> u64(1, (1ull << 63) + ctx.rank), u64_out(1);
      ctx.world->all_reduce(TensorView(u64.data(), DType::kU64, Device::cpu(), {1}),
                            TensorView(u64_out.data(), DType::kU64, Device::cpu(), {1}),
                            ReduceOp::kMax, ctx.stream);
      wrong += u64_out[0] != (1ull << 63) + uint64_t(n - 1);
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
  }
}

// Reference: combine ranks left to right in float, round once for f16/bf16.
float reference_reduce(const std::vector<std::vector<float>>& inputs, int64_t i, ReduceOp op) {
  float acc = inputs[0][i];
  for (size_t r = 1; r < inputs.size(); ++r) {
    float x = inputs[r][i];
    acc = op == ReduceOp::kSum   ? acc + x
          : op == ReduceOp::kMax ? std::max(acc, x)
                                 : std::min(acc, x);
  }
  return acc;
}

TEST(CpuCollectives, FloatReductionsMatchRankOrderReferenceBitExactly) {
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
  for (const Layout& l : all_layouts()) {
    SCOPED_TRACE(layout_name(l));
    const int64_t block = 9;
    const int n = l.ranks;
    // Inputs of every rank: k / 64 with |k| < 256, exact in f32, f16 and bf16 alike.
    std::vector<std::vector<float>> inputs(n, std::vector<float>(n * block));
    std::mt19937 gen(1234 + n);
    std::uniform_int_distribution<int> dist(-255, 255);
    for (auto& v : inputs) {
      for (float& x : v) x = float(dist(gen)) / 64.0f;
    }
    std::vector<std::vector<uint8_t>> all_reduce_bits(n);
    run_cpu_ranks(l.ranks, l.machines, test_options(false), [&](RankContext& ctx) {
      int wrong = 0;
      for (DType dt : dtypes) {
        const size_t es = dtype_size(dt);
        std::vector<uint8_t> send(n * block * es), part(block * es), full(n * block * es);
        for (int64_t i = 0; i < n * block; ++i)
          store_from_float(send.data(), dt, i, inputs[ctx.rank][i]);
        TensorView s(send.data(), dt, Device::cpu(), {n * block});
        for (ReduceOp op : ops) {
          ctx.world->reduce_scatter(s, TensorView(part.data(), dt, Device::cpu(), {block}), op,
                                    ctx.stream);
          ctx.world->all_reduce(s, TensorView(full.data(), dt, Device::cpu(), {n * block}), op,
                                ctx.stream);
          std::vector<uint8_t> want(es);
          for (int64_t e = 0; e < block; ++e) {
            store_from_float(want.data(), dt, 0,
                             reference_reduce(inputs, ctx.rank * block + e, op));
            wrong += std::memcmp(part.data() + e * es, want.data(), es) != 0;
          }
          for (int64_t i = 0; i < n * block; ++i) {
            store_from_float(want.data(), dt, 0, reference_reduce(inputs, i, op));
            wrong += std::memcmp(full.data() + i * es, want.data(), es) != 0;
          }
          if (dt == DType::kF32 && op == ReduceOp::kSum) all_reduce_bits[ctx.rank] = full;
        }
      }
      EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
    });
    for (int r = 1; r < n; ++r) EXPECT_EQ(all_reduce_bits[r], all_reduce_bits[0]) << "rank " << r;
  }
}

TEST(CpuCollectives, InPlaceAllReduceAndEmptyBuffers) {
  run_cpu_ranks(4, 2, test_options(false), [](RankContext& ctx) {
    std::vector<float> v(6);
    for (int i = 0; i < 6; ++i) v[i] = float(ctx.rank * 10 + i);
    TensorView t(v.data(), DType::kF32, Device::cpu(), {2, 3});
    ctx.world->all_reduce(t, t, ReduceOp::kSum, ctx.stream);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], float(60 + 4 * i));
    // Zero elements: still a rendezvous, nothing written.
    TensorView empty(nullptr, DType::kF32, Device::cpu(), {0});
    ctx.world->all_gather(empty, empty, ctx.stream);
    ctx.world->all_reduce(empty, empty, ReduceOp::kMax, ctx.stream);
    ctx.world->all_to_all(empty, empty, ctx.stream);
    ctx.world->reduce_scatter(empty, empty, ReduceOp::kSum, ctx.stream);
    ctx.world->group_begin();
    ctx.world->send(empty, (ctx.rank + 1) % ctx.size, ctx.stream);
    ctx.world->recv(empty, (ctx.rank + ctx.size - 1) % ctx.size, ctx.stream);
    ctx.world->group_end();
    ctx.world->barrier(ctx.stream);
    ctx.world->synchronize(ctx.stream);
  });
}

TEST(CpuCollectives, ManyBackToBackCollectivesStayInStep) {
  // Ranks race ahead of each other across collectives; each must land in its own slot.
  run_cpu_ranks(8, 4, test_options(false), [](RankContext& ctx) {
    const int n = ctx.size;
    std::vector<uint64_t> send(1), recv(n);
    int wrong = 0;
    for (int iter = 0; iter < 200; ++iter) {
      send[0] = encode(ctx.rank, iter);
      ctx.world->all_gather(TensorView(send.data(), DType::kU64, Device::cpu(), {1}),
                            TensorView(recv.data(), DType::kU64, Device::cpu(), {n}), ctx.stream);
      for (int r = 0; r < n; ++r) wrong += recv[r] != encode(r, iter);
      if (iter % 7 == 0) ctx.world->barrier(ctx.stream);
    }
    EXPECT_EQ(wrong, 0) << "rank " << ctx.rank;
  });
}

}  // namespace
}  // namespace tessera
