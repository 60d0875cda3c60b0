// The operator scheduler on the tiny Llama model over 1, 2 and 4 tensor-parallel rank threads:
// every strategy's logits equal the plain forward's bitwise (a mixed prefill of four
// sequences, then a batched decode step), TokenWeave's fused reduce-scatter + norm + all-gather
// and Flux's fused GEMM+ReduceScatter + all-gather included; nano-batches are row ranges of the batch, balanced by tokens, each sequence in one;
// running an operation before its input, or fusing a group the model has no fused form of, is
// an error naming it.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <tuple>
#include <vector>

#include "cpu_dist_util.h"
#include "sched_test_util.h"
#include "tessera/core/error.h"
#include "tessera/model/llama_model.h"
#include "tessera/sched/schedule.h"
#include "tessera/sched/timeline.h"

namespace tessera::testing {
namespace {

using model::LlamaModel;
using model::SequenceTokens;

constexpr uint64_t kSeed = 11;

TEST(Scheduler, EveryStrategyGivesThePlainForwardBitwise) {
  const model::DecoderConfig config = tiny_llama_config();
  for (int ranks : {1, 2, 4}) {
    // The heap: flux's fused GEMM+ReduceScatter operations.
    run_cpu_ranks(ranks, 1, test_options(/*create_heap=*/true), [&](RankContext& ctx) {
      auto make = [&] {
        return LlamaModel(config, model::random_llama_weights(config, kSeed, ctx.rank, ctx.size),
                          {4, 64}, ctx);
      };
      LlamaModel plain = make();
      const std::vector<std::vector<float>> want = prefill_then_decode(plain, nullptr);
      std::vector<std::string> names = sched::strategy_names();
      names.push_back("nanoflow:40");  // another share of the multiprocessors: the same order
      names.push_back("nanoflow:60:0:4");  // the split by overlap cost
      names.push_back("flux");         // cpu only so far: not among strategy_names()
      names.push_back("single_batch:8");  // the prefill's pairs in 8 chunks, the decode's in 1
      names.push_back("single_batch:1");  // every row a chunk (at most 8)
      // Partitions: the rest of the steps run by the context in chain order.
      for (const char* partitioned :
           {"nanoflow@layers=1", "dual_batch@ops=attention+o_proj+o_all_reduce",
            "tokenweave@layers=0-1/ops=o_all_reduce+mlp_norm+mlp_all_reduce+attn_norm",
            "single_batch:8@layers=0-0", "nanoflow@layers=7"})
        names.push_back(partitioned);
      for (const std::string& name : names) {
        LlamaModel m = make();
        const auto strategy = sched::make_strategy(name);
        EXPECT_EQ(prefill_then_decode(m, strategy.get()), want)
            << name << " on rank " << ctx.rank << " of " << ctx.size;
      }
    });
  }
}

// A timeline holds a span for each operation of each nano-batch, in the order they ran, on the
// stream the strategy placed it on; the next forward replaces it, and unset it records nothing.
TEST(Scheduler, TheTimelineRecordsEveryOperationWhereItRan) {
  const model::DecoderConfig config = tiny_llama_config();
  run_cpu_ranks(1, 1, test_options(), [&](RankContext& ctx) {
    LlamaModel m(config, model::random_llama_weights(config, kSeed, ctx.rank, ctx.size), {4, 64},
                 ctx);
    const auto nanoflow = sched::make_strategy("nanoflow");
    sched::Timeline timeline;
    m.set_timeline(&timeline);
    prefill_then_decode(m, nanoflow.get());  // the decode step: four rows, one nano-batch
    const int64_t ops = config.num_hidden_layers * model::kLlamaOps;
    EXPECT_EQ(int64_t(timeline.spans.size()), ops);
    std::vector<model::SequenceTokens> prefill;
    int salt = 0;
    for (int64_t n : {40, 40}) prefill.push_back({m.add_sequence(), test_tokens(n, ++salt)});
    m.forward(prefill, *nanoflow);  // 80 rows: two nano-batches
    ASSERT_EQ(int64_t(timeline.spans.size()), 2 * ops);
    int per_nano[2] = {0, 0};
    for (size_t i = 0; i < timeline.spans.size(); ++i) {
      const sched::TimelineSpan& s = timeline.spans[i];
      ASSERT_TRUE(s.nano == 0 || s.nano == 1);
      ++per_nano[s.nano];
      EXPECT_LE(s.start_us, s.end_us);
      if (i > 0) EXPECT_GE(s.start_us, timeline.spans[i - 1].end_us);  // inline on the cpu
      if (s.step.op == model::LlamaOp::kAttention) EXPECT_EQ(s.stream, model::OpKind::kMemory);
      if (s.step.op == model::LlamaOp::kQkv) EXPECT_EQ(s.stream, model::OpKind::kCompute);
    }
    EXPECT_EQ(per_nano[0], ops);
    EXPECT_EQ(per_nano[1], ops);
    m.set_timeline(nullptr);
    for (auto& s : prefill) s.tokens = {1};
    m.forward(prefill, *nanoflow);
    EXPECT_EQ(int64_t(timeline.spans.size()), 2 * ops);  // untouched once unset
  });
}

TEST(Scheduler, NanoBatchesAreBalancedRowRangesOfWholeSequences) {
  for (const auto& lengths : std::vector<std::vector<int64_t>>{
           {5, 9, 3, 70}, {1, 1, 1, 1, 1, 1, 1}, {100}, {40, 40}, {}}) {
    for (int parts : {1, 2, 3}) {
      const model::PackedBatch b = batch_of(lengths);
      const std::vector<sched::NanoBatch> nanos = sched::token_balanced_split(b, parts);
      EXPECT_LE(int(nanos.size()), parts);
      size_t seq = 0;
      int64_t row = 0;
      for (const sched::NanoBatch& n : nanos) {
        EXPECT_EQ(n.first_seq, seq);  // contiguous, in order: a view of the batch's rows
        EXPECT_EQ(n.first_row, row);
        EXPECT_GE(n.num_seqs, 1u);
        int64_t rows = 0;
        for (size_t i = n.first_seq; i < n.first_seq + n.num_seqs; ++i) rows += lengths[i];
        EXPECT_EQ(n.rows, rows);
        seq += n.num_seqs;
        row += n.rows;
      }
      EXPECT_EQ(seq, lengths.size());
    }
  }
  // Decode batches split evenly.
  const auto even = sched::token_balanced_split(batch_of({1, 1, 1, 1, 1, 1}), 2);
  ASSERT_EQ(even.size(), 2u);
  EXPECT_EQ(even[0].rows, 3);
}

// A nano-batch counts the positions its sequences had cached (what its attention reads besides
// its rows); a range outside the batch is refused by name.
TEST(Scheduler, NanoBatchesCountTheirCachedPositions) {
  model::PackedBatch b = batch_of({1, 1, 1, 6});
  b.sequences[0].start = 100;  // three decodes after 100, 200 and 300 positions, then a prompt
  b.sequences[1].start = 200;
  b.sequences[2].start = 300;
  const auto halves = sched::token_balanced_split(b, 2);
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(halves[0].cached_positions, 600);
  EXPECT_EQ(halves[1].cached_positions, 0);
  const sched::NanoBatch middle = sched::nano_batch_of(b, 1, 2);
  EXPECT_EQ(middle.first_row, 1);
  EXPECT_EQ(middle.rows, 2);
  EXPECT_EQ(middle.cached_positions, 500);
  for (auto [first, count] : {std::pair<size_t, size_t>{0, 0}, {4, 1}, {2, 3}}) {
    expect_error([&] { (void)sched::nano_batch_of(b, first, count); }, ErrorCode::kInvalidArgument,
                 {str("nano-batch of sequences [", first, ", ", first + count, ")"),
                  "expected at least one of the batch's 4"});
  }
}

// The split by overlap cost: each nano-batch's attention beside the other's GEMMs, a phase
// costing the larger of the two (cached positions / positions_per_row against rows), the GEMMs
// beside an attention that reads no cache on the whole GPU (rows x share).
TEST(Scheduler, OverlapBalancedSplitFinishesBothPhasesSoonest) {
  // Four decodes after 100 positions each, then a prompt of 4 rows; 50 positions a row, GEMMs
  // on half the SMs. Split after k sequences:
  //   k 1: max(100/50, 7) + max(300/50, 1) = 13     k 3: max(6, 5) + max(2, 3) = 9
  //   k 2: max(4, 6) + max(4, 2) = 10               k 4: max(8, 4) + 4 x 0.5 = 10
  model::PackedBatch b = batch_of({1, 1, 1, 1, 4});
  for (size_t i = 0; i < 4; ++i) b.sequences[i].start = 100;
  const auto split = sched::overlap_balanced_split(b, 50, 50);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0].num_seqs, 3u);
  EXPECT_EQ(split[0].cached_positions, 300);
  EXPECT_EQ(split[1].first_row, 3);
  EXPECT_EQ(split[1].rows, 5);
  EXPECT_EQ(sched::token_balanced_split(b, 2)[0].num_seqs, 4u);  // equal tokens: the decodes
  // bench sched's 2048-row step (1536 decodes after 1024 positions, one prompt of 512) at 836
  // positions a row and a 60% share: every split from 846 to 920 decodes costs 2048 rows (the
  // GEMMs bound both phases), and 920, the most even of them, wins; not half the rows (1024).
  std::vector<int64_t> lengths(1536, 1);
  lengths.push_back(512);
  model::PackedBatch mix = batch_of(lengths);
  for (size_t i = 0; i < 1536; ++i) mix.sequences[i].start = 1024;
  EXPECT_EQ(sched::overlap_balanced_split(mix, 836, 60)[0].num_seqs, 920u);
  // No cache read: every split costs the same, and the most even one wins.
  const auto prompts = sched::overlap_balanced_split(batch_of({4, 4, 4, 4}), 50, 60);
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[0].rows, 8);
  EXPECT_EQ(sched::overlap_balanced_split(batch_of({9}), 50, 60).size(), 1u);
  expect_error([&] { (void)sched::overlap_balanced_split(b, 0, 60); }, ErrorCode::kInvalidArgument,
               {"positions_per_row = 0", "1 to 16777216"});
  expect_error([&] { (void)sched::overlap_balanced_split(b, 50, 101); },
               ErrorCode::kInvalidArgument, {"gemm_sm_percent = 101", "1 to 100"});
}

// run_fused accepts only the kinds of fused group the strategy declared, so a model's check of
// the declaration (before anything runs) cannot be bypassed.
TEST(Scheduler, RunFusedRefusesGroupsTheStrategyDidNotDeclare) {
  using model::FusedGroup;
  using model::LlamaOp;
  int fused = 0;
  auto context = [&](std::optional<std::vector<FusedGroup>> declared) {
    sched::ScheduleContext ctx(
        1, {{0, 1, 0, 4}}, [](const sched::NanoBatch&, sched::Step, const sched::Placement&) {},
        [&](const sched::NanoBatch&, sched::Step, FusedGroup, const sched::FusedOptions&) {
          ++fused;
        },
        2, std::move(declared));
    while (ctx.ready(0)->op != LlamaOp::kOProj) ctx.run_next(0);
    return ctx;
  };
  const sched::Step o_proj{0, LlamaOp::kOProj}, o_all_reduce{0, LlamaOp::kOAllReduce};

  sched::ScheduleContext none = context(std::vector<FusedGroup>{});
  expect_error([&] { none.run_fused(0, o_proj, FusedGroup::kRowParallelPair); },
               ErrorCode::kInvalidArgument,
               {"nano-batch 0: a row-parallel GEMM+all-reduce group from layer 0 o_proj",
                "the strategy did not declare that kind"});
  sched::ScheduleContext norm_only = context(std::vector{FusedGroup::kAllReduceNorm});
  expect_error([&] { norm_only.run_fused(0, o_proj, FusedGroup::kRowParallelPair); },
               ErrorCode::kInvalidArgument, {"did not declare"});
  expect_error([&] { norm_only.run_fused(0, o_proj, FusedGroup::kAllReduceNorm); },
               ErrorCode::kInvalidArgument,
               {"all-reduce+RMSNorm group from layer 0 o_proj: no such group starts there"});
  sched::ScheduleContext pipelined = context(std::vector{FusedGroup::kRowParallelPipelined});
  for (int chunks : {0, 65})
    expect_error(
        [&] { pipelined.run_fused(0, o_proj, FusedGroup::kRowParallelPipelined, {chunks}); },
        ErrorCode::kInvalidArgument, {str("chunks = ", chunks, ": expected 1 to 64")});
  for (int percent : {0, 101})
    expect_error(
        [&] {
          pipelined.run_fused(0, o_proj, FusedGroup::kRowParallelPipelined, {2, percent});
        },
        ErrorCode::kInvalidArgument, {str("gemm_sm_percent = ", percent, ": expected 1 to 100")});
  EXPECT_EQ(fused, 0);
  norm_only.run_next(0);
  expect_error([&] { norm_only.run_fused(0, o_all_reduce, FusedGroup::kAllReduceNorm, {2}); },
               ErrorCode::kInvalidArgument, {"chunks = 2: expected 1 to 1"});
  norm_only.run_fused(0, o_all_reduce, FusedGroup::kAllReduceNorm);
  EXPECT_EQ(fused, 1);
  pipelined.run_fused(0, o_proj, FusedGroup::kRowParallelPipelined, {64, 50});
  EXPECT_EQ(fused, 2);
  sched::ScheduleContext unchecked = context(std::nullopt);  // driven by hand: not checked
  unchecked.run_fused(0, o_proj, FusedGroup::kRowParallelPair);
  EXPECT_EQ(fused, 3);
}

TEST(Scheduler, AnOperationBeforeItsInputIsAnError) {
  std::vector<std::pair<int, sched::Step>> ran;
  sched::ScheduleContext ctx(
      2, {{0, 1, 0, 4}, {1, 1, 4, 4}},
      [&](const sched::NanoBatch& n, sched::Step s, const sched::Placement&) {
        ran.push_back({int(n.first_seq), s});
      });
  ctx.run_next(0);  // layer 0 attn_norm of nano-batch 0
  expect_error([&] { ctx.run(0, {0, model::LlamaOp::kAttention}); }, ErrorCode::kInvalidArgument,
               {"nano-batch 0: layer 0 attention before its input: layer 0 qkv has not run"});
  expect_error([&] { ctx.run(1, {1, model::LlamaOp::kAttnNorm}); }, ErrorCode::kInvalidArgument,
               {"nano-batch 1: layer 1 attn_norm before its input: layer 0 mlp_all_reduce"});
  expect_error([&] { ctx.run(0, {0, model::LlamaOp::kAttnNorm}); }, ErrorCode::kInvalidArgument,
               {"already ran"});
  expect_error([&] { ctx.run_next(2); }, ErrorCode::kInvalidArgument, {"nano-batch 2"});
  EXPECT_EQ(ran.size(), 1u);  // refused operations did not run
  while (ctx.ready(1)) ctx.run_next(1);
  while (ctx.ready(0)) ctx.run_next(0);
  EXPECT_TRUE(ctx.finished());
  EXPECT_EQ(ctx.trace().size(), size_t(2 * 2 * model::kLlamaOps));
  expect_error(
      [] { sched::make_strategy("fluxx"); }, ErrorCode::kInvalidArgument,
      {"strategy = 'fluxx'",
       "sequential, nanoflow[:P[:W[:K]]], dual_batch, single_batch[:R[:P]], tokenweave or flux"});
  for (const char* bad : {"nanoflow:0", "nanoflow:101", "nanoflow:", "nanoflow:7x",
                          "nanoflow:60:-1", "nanoflow:60:65", "nanoflow:60:", "nanoflow:60:1:0",
                          "nanoflow:60;1", "nanoflow:60:1:16777217", "nanoflow:60:1:2:3"})
    expect_error([&] { sched::make_strategy(bad); }, ErrorCode::kInvalidArgument,
                 {str("strategy = '", bad, "'"), "1 to 100", "0 (all) to 64", "1 to 16777216"});
  EXPECT_EQ(sched::make_strategy("nanoflow:60")->name(), "nanoflow:60");
  EXPECT_EQ(sched::make_strategy("nanoflow:60:0")->name(), "nanoflow:60");
  EXPECT_EQ(sched::make_strategy("nanoflow:60:2")->name(), "nanoflow:60:2");
  EXPECT_EQ(sched::make_strategy("nanoflow:60:0:800")->name(), "nanoflow:60:0:800");
  EXPECT_TRUE(sched::known_strategy("nanoflow:60"));
  EXPECT_FALSE(sched::known_strategy("nanoflow:-1"));
  sched::ScheduleContext placed(
      1, {{0, 1, 0, 4}}, [](const sched::NanoBatch&, sched::Step, const sched::Placement&) {});
  expect_error([&] { placed.run_next(0, {std::nullopt, 0}); }, ErrorCode::kInvalidArgument,
               {"gemm_sm_percent = 0", "1 to 100"});
  const sched::Placement attention_over_all{std::nullopt, 100, 101};
  expect_error([&] { placed.run_next(0, attention_over_all); }, ErrorCode::kInvalidArgument,
               {"attention_sm_percent = 101", "1 to 100"});
  // Fused groups: only from the ready step, only with a fused executor, not past the chain.
  sched::ScheduleContext fused(
      1, {{0, 1, 0, 4}}, [](const sched::NanoBatch&, sched::Step, const sched::Placement&) {},
      [](const sched::NanoBatch&, sched::Step, model::FusedGroup, const sched::FusedOptions&) {});
  constexpr model::FusedGroup kNorm = model::FusedGroup::kAllReduceNorm;
  const sched::Step qkv{0, model::LlamaOp::kQkv}, attn_norm{0, model::LlamaOp::kAttnNorm},
      o_all_reduce{0, model::LlamaOp::kOAllReduce},
      mlp_all_reduce{0, model::LlamaOp::kMlpAllReduce};
  expect_error([&] { fused.run_fused(0, qkv, kNorm); }, ErrorCode::kInvalidArgument,
               {"layer 0 qkv before its input"});
  while (fused.ready(0)->op != mlp_all_reduce.op) fused.run_next(0);
  expect_error([&] { fused.run_fused(0, mlp_all_reduce, kNorm); }, ErrorCode::kInvalidArgument,
               {"past the end of its chain"});
  expect_error([&] { ctx.run_fused(0, attn_norm, kNorm); }, ErrorCode::kInvalidArgument,
               {"after its last operation"});
  sched::ScheduleContext plain(
      1, {{0, 1, 0, 4}}, [](const sched::NanoBatch&, sched::Step, const sched::Placement&) {});
  while (plain.ready(0)->op != o_all_reduce.op) plain.run_next(0);
  expect_error([&] { plain.run_fused(0, o_all_reduce, kNorm); }, ErrorCode::kInvalidArgument,
               {"no fused executor"});
}

// A strategy that fuses steps that are no fused group (and declares none).
class FusesTheWrongGroup final : public sched::Strategy {
 public:
  std::string name() const override { return "wrong"; }
  std::vector<sched::NanoBatch> split(const model::PackedBatch& b) const override {
    return sched::token_balanced_split(b, 1);
  }
  void schedule(sched::ScheduleContext& ctx) const override {
    ctx.run_next(0);  // attn_norm
    // qkv + attention: no such fused operation
    ctx.run_fused(0, {0, model::LlamaOp::kQkv}, model::FusedGroup::kRowParallelPair);
  }
};

TEST(Scheduler, TheModelRefusesAFusedGroupItHasNoFormOf) {
  const model::DecoderConfig config = tiny_llama_config();
  LlamaModel m(config, model::random_llama_weights(config, kSeed, 0, 1), {4, 64}, nullptr);
  std::vector<SequenceTokens> in = {{m.add_sequence(), test_tokens(5, 1)}};
  expect_error([&] { m.forward(in, FusesTheWrongGroup()); }, ErrorCode::kInvalidArgument,
               {"nano-batch 0: a row-parallel GEMM+all-reduce group from layer 0 qkv: no such "
                "group starts there"});
}

// Flux runs each row-parallel pair (o_proj + its all-reduce, down + its all-reduce) as one fused
// group across ranks, nothing fused on one rank; a model without a heap refuses the group.
TEST(Scheduler, FluxFusesEachRowParallelPair) {
  for (int group : {1, 2}) {
    std::vector<model::LlamaOp> fused_first;
    sched::ScheduleContext ctx(
        2, {{0, 1, 0, 40}}, [](const sched::NanoBatch&, sched::Step, const sched::Placement&) {},
        [&](const sched::NanoBatch&, sched::Step first, model::FusedGroup g,
            const sched::FusedOptions& how) {
          EXPECT_EQ(g, model::FusedGroup::kRowParallelPair);
          EXPECT_EQ(how.chunks, 1);
          EXPECT_EQ(how.gemm_sm_percent, 100);
          fused_first.push_back(first.op);
        },
        group);
    sched::make_strategy("flux")->schedule(ctx);
    EXPECT_TRUE(ctx.finished());
    const std::vector<model::LlamaOp> want =
        group == 1 ? std::vector<model::LlamaOp>{}
                   : std::vector<model::LlamaOp>{model::LlamaOp::kOProj, model::LlamaOp::kDown,
                                                 model::LlamaOp::kOProj, model::LlamaOp::kDown};
    EXPECT_EQ(fused_first, want) << "group of " << group;
  }
  const model::DecoderConfig config = tiny_llama_config();
  run_cpu_ranks(2, 1, test_options(/*create_heap=*/false), [&](RankContext& ctx) {
    LlamaModel m(config, model::random_llama_weights(config, kSeed, ctx.rank, ctx.size), {4, 64},
                 ctx);
    std::vector<SequenceTokens> in = {{m.add_sequence(), test_tokens(5, 1)}};
    expect_error([&] { m.forward(in, *sched::make_strategy("flux")); }, ErrorCode::kUnsupported,
                 {"o_proj", "strategy flux", "symmetric heap"});
  });
}

// Every fused group a strategy runs is of a kind it declares (what models check before they run
// anything), on one and two nano-batches, alone and across ranks.
TEST(Scheduler, StrategiesDeclareTheFusedGroupsTheyRun) {
  std::vector<std::string> names = sched::strategy_names();
  names.push_back("flux");
  const int64_t layers = 3;
  for (const std::string& name : names) {
    const std::unique_ptr<sched::Strategy> strategy = sched::make_strategy(name);
    const std::vector<model::FusedGroup> declared = strategy->fused_groups();
    std::vector<model::FusedGroup> ran;
    for (int group : {1, 2}) {
      // Rows enough for single_batch's chunks.
      for (const std::vector<sched::NanoBatch>& nanos :
           {std::vector<sched::NanoBatch>{{0, 1, 0, 4096}},
            std::vector<sched::NanoBatch>{{0, 1, 0, 4096}, {1, 1, 4096, 4096}}}) {
        sched::ScheduleContext ctx(
            layers, nanos, [](const sched::NanoBatch&, sched::Step, const sched::Placement&) {},
            [&](const sched::NanoBatch&, sched::Step first, model::FusedGroup kind,
                const sched::FusedOptions&) {
              if (kind == model::FusedGroup::kAllReduceNorm)
                (void)model::all_reduce_norm_group(first.layer, first.op, layers);
              ran.push_back(kind);
            },
            group, declared);  // the context refuses an undeclared group itself
        strategy->schedule(ctx);
        EXPECT_TRUE(ctx.finished()) << name;
      }
    }
    for (model::FusedGroup g : ran) {
      EXPECT_NE(std::find(declared.begin(), declared.end(), g), declared.end())
          << name << " ran a " << model::fused_group_name(g) << " group it does not declare";
    }
    for (model::FusedGroup g : declared) {
      EXPECT_NE(std::find(ran.begin(), ran.end(), g), ran.end())
          << name << " declares " << model::fused_group_name(g) << " and never ran one";
    }
  }
}

// The orders the strategies choose on two nano-batches of two layers.
TEST(Scheduler, StrategiesInterleaveAsTheyPromise) {
  // Two nano-batches of 40 decodes each (40 rows, 40 * 100 cached positions).
  std::vector<sched::NanoBatch> two = {{0, 40, 0, 40, 4000}, {40, 40, 40, 40, 4000}};
  std::vector<sched::Placement> placed;  // of the last trace_of's operations, in order
  auto trace_of = [&](const std::string& name, int group_size = 1) {
    placed.clear();
    sched::ScheduleContext ctx(
        2, two,
        [&](const sched::NanoBatch&, sched::Step, const sched::Placement& p) {
          placed.push_back(p);
        },
        [](const sched::NanoBatch&, sched::Step, model::FusedGroup, const sched::FusedOptions&) {},
        group_size);
    sched::make_strategy(name)->schedule(ctx);
    EXPECT_TRUE(ctx.finished()) << name;
    return ctx.trace();
  };
  using model::LlamaOp;
  using model::OpKind;
  // NanoFlow: a nano-batch hands over right after its attention (and, across ranks, after its
  // collectives), and only then; everything but the attention (and real collectives) on the
  // compute stream; the GEMMs between one nano-batch's attention and its own next compute
  // operation (nanoflow:P), or the first W of them (nanoflow:P:W), run on P% of the
  // multiprocessors, the others on all; each attention on the other (100 - P)%. Beside the
  // attention of a nano-batch of new prompts (no cached positions: `prompts`), all.
  const auto is_gemm = [](LlamaOp op) { return model::llama_op_kind(op) == OpKind::kCompute; };
  for (const auto& [name, group, window, prompts] :
       std::vector<std::tuple<std::string, int, int, bool>>{{"nanoflow:60", 1, 0, false},
                                                            {"nanoflow:60", 2, 0, false},
                                                            {"nanoflow:60:2", 1, 2, false},
                                                            {"nanoflow:60", 1, 0, true},
                                                            {"nanoflow:60:2", 1, 2, true}}) {
    SCOPED_TRACE(name + " on " + std::to_string(group) + (prompts ? ", prompts second" : ""));
    two[1].cached_positions = prompts ? 0 : 4000;
    const auto reads_cache = [&](int n) { return two[size_t(n)].cached_positions > 0; };
    const auto nf = trace_of(name, group);
    ASSERT_EQ(placed.size(), nf.size());
    int attending = -1, switches = 0, shared = 0, left = 0;
    for (size_t i = 0; i < nf.size(); ++i) {
      const auto [n, s] = nf[i];
      const OpKind kind = model::llama_op_kind(s.op);
      const OpKind want = s.op == LlamaOp::kAttention             ? OpKind::kMemory
                          : kind == OpKind::kNetwork && group > 1 ? OpKind::kNetwork
                                                                  : OpKind::kCompute;
      EXPECT_EQ(placed[i].stream, want) << "at " << i;
      if (i > 0 && n != nf[i - 1].first) {
        ++switches;
        const sched::Step prev = nf[i - 1].second;
        const bool chain_done = prev.layer == 1 && prev.op == LlamaOp::kMlpAllReduce;
        EXPECT_TRUE(prev.op == LlamaOp::kAttention || chain_done ||
                    (group > 1 && model::llama_op_kind(prev.op) == OpKind::kNetwork))
            << "switch at " << i;
      }
      if (want == OpKind::kCompute) {
        const bool beside = attending >= 0 && attending != n && is_gemm(s.op) &&
                            (window == 0 || left-- > 0);
        if (attending == n) attending = -1;
        EXPECT_EQ(placed[i].gemm_sm_percent, beside ? 60 : 100) << "at " << i;
        shared += beside;
      }
      const bool shares = s.op == LlamaOp::kAttention && reads_cache(n);
      EXPECT_EQ(placed[i].attention_sm_percent, shares ? 40 : 100) << "at " << i;
      if (s.op == LlamaOp::kAttention) {
        attending = shares ? n : -1;
        left = window;
      }
    }
    EXPECT_GE(switches, 4);  // after each of the four attentions
    // Of the 16 GEMMs, on one rank 12 run beside an attention (the first and the last three
    // not); across ranks each nano-batch also hands over at its collectives, so fewer do; a
    // window of 2 takes 2 after each of the four attentions but the first's (one GEMM, the other
    // nano-batch's qkv, runs before its attention is issued). With the second nano-batch new
    // prompts, only the second's GEMMs beside the first's two attentions: its qkv (1), then its
    // o projection, gate/up, down and next qkv (4), or of those the first W.
    const int expected = prompts       ? (window == 2 ? 1 + 2 : 1 + 4)
                         : window == 2 ? 1 + 2 + 2 + 2
                         : group == 1  ? 12
                                       : shared;
    EXPECT_EQ(shared, expected);
    EXPECT_GE(shared, 3);
  }
  // Dual-batch: a nano-batch hands over right after each of its collectives, and only then.
  const auto db = trace_of("dual_batch");
  for (size_t i = 1; i < db.size(); ++i) {
    const bool after_collective =
        model::llama_op_kind(db[i - 1].second.op) == model::OpKind::kNetwork;
    if (db[i].first != db[i - 1].first) EXPECT_TRUE(after_collective) << "switch at " << i;
  }
  EXPECT_EQ(db[0].first, 0);
  EXPECT_EQ(db[5].first, 1);  // nano-batch 0's o_all_reduce is its 5th operation
  // TokenWeave: dual-batch's hand-overs, and each all-reduce fused with the norm after it (the
  // two traced back to back), but the last layer's MLP all-reduce, which has no norm after it.
  const auto tw = trace_of("tokenweave");
  for (size_t i = 1; i < tw.size(); ++i) {
    const model::LlamaOp prev = tw[i - 1].second.op;
    if (tw[i].first != tw[i - 1].first) {
      const bool after_norm_or_last = prev == model::LlamaOp::kMlpNorm ||
                                      prev == model::LlamaOp::kAttnNorm ||
                                      prev == model::LlamaOp::kMlpAllReduce;
      EXPECT_TRUE(after_norm_or_last) << "switch at " << i;
    }
  }
  // Sequential: nano-batch 0's chain, then 1's, all on the compute stream.
  const auto seq = trace_of("sequential");
  for (size_t i = 0; i < seq.size(); ++i) {
    EXPECT_EQ(seq[i].first, i < seq.size() / 2 ? 0 : 1);
    EXPECT_EQ(placed[i].stream, OpKind::kCompute);
    EXPECT_EQ(placed[i].gemm_sm_percent, 100);
  }
}

// A partition: the strategy sees only its steps (here layer 1's attention and o_proj on two
// nano-batches); the context runs the others itself, in chain order, as each nano-batch reaches
// them, and refuses a fused group whose second step lies outside.
TEST(Scheduler, APartitionLeavesTheOtherStepsToTheContext) {
  using model::LlamaOp;
  std::vector<std::pair<int, sched::Step>> asked;  // the steps the strategy saw ready
  std::vector<sched::Placement> placed;
  sched::ScheduleContext ctx(
      2, {{0, 1, 0, 40}, {1, 1, 40, 40}},
      [&](const sched::NanoBatch&, sched::Step, const sched::Placement& p) { placed.push_back(p); },
      [](const sched::NanoBatch&, sched::Step, model::FusedGroup, const sched::FusedOptions&) {}, 2,
      std::nullopt, sched::parse_partition("layers=1/ops=attention+o_proj"));
  // Each nano-batch ran layer 0 and layer 1 up to its attention already.
  EXPECT_EQ(ctx.trace().size(), size_t(2 * (model::kLlamaOps + 2)));
  for (int n : {1, 0}) {
    while (const std::optional<sched::Step> s = ctx.ready(n)) {
      asked.push_back({n, *s});
      ctx.run_next(n, {model::OpKind::kMemory});
    }
  }
  EXPECT_TRUE(ctx.finished());
  const std::vector<std::pair<int, sched::Step>> want = {{1, {1, LlamaOp::kAttention}},
                                                         {1, {1, LlamaOp::kOProj}},
                                                         {0, {1, LlamaOp::kAttention}},
                                                         {0, {1, LlamaOp::kOProj}}};
  ASSERT_EQ(asked.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(asked[i].first, want[i].first);
    EXPECT_EQ(asked[i].second.layer, want[i].second.layer);
    EXPECT_EQ(asked[i].second.op, want[i].second.op);
  }
  EXPECT_EQ(ctx.trace().size(), size_t(2 * 2 * model::kLlamaOps));
  // Only the strategy's four steps went where it placed them; the context's on compute.
  EXPECT_EQ(
      std::count_if(placed.begin(), placed.end(),
                    [](const sched::Placement& p) { return p.stream == model::OpKind::kMemory; }),
      4);
  for (size_t i = 0; i < ctx.trace().size(); ++i) {  // each chain in order
    const auto [n, s] = ctx.trace()[i];
    for (size_t j = 0; j < i; ++j) {
      const auto [m, t] = ctx.trace()[j];
      if (m == n)
        EXPECT_LT(t.layer * model::kLlamaOps + int(t.op), s.layer * model::kLlamaOps + int(s.op));
    }
  }
  sched::ScheduleContext pair(
      1, {{0, 1, 0, 40}}, [](const sched::NanoBatch&, sched::Step, const sched::Placement&) {},
      [](const sched::NanoBatch&, sched::Step, model::FusedGroup, const sched::FusedOptions&) {}, 2,
      std::nullopt, sched::parse_partition("ops=o_proj"));
  expect_error(
      [&] {
        pair.run_fused(0, {0, LlamaOp::kOProj}, model::FusedGroup::kRowParallelPipelined);
      },
      ErrorCode::kInvalidArgument, {"its second step is outside the strategy's partition"});
  for (const char* bad : {"", "layers=", "layers=2-1", "layers=-1", "layers=a", "layers=1/layers=2",
                          "cols=1", "layers=1/"})
    expect_error([&] { sched::parse_partition(bad); }, ErrorCode::kInvalidArgument,
                 {str("partition '", bad, "'"), "expected layers=A-B"});
  for (const char* bad : {"ops=", "ops=qkv+", "layers=1/ops=qkvv"})
    expect_error([&] { sched::parse_partition(bad); }, ErrorCode::kInvalidArgument,
                 {str("partition '", bad, "': op = '"), "expected attn_norm"});
  EXPECT_EQ(sched::make_strategy("nanoflow:60@layers=2-5")->name(), "nanoflow:60@layers=2-5");
  expect_error([] { sched::make_strategy("nanoflow@rows=2"); }, ErrorCode::kInvalidArgument,
               {"partition 'rows=2'"});
}

// Single-batch overlap: one nano-batch in order; across ranks each row-parallel pair runs as one
// pipelined group of one chunk per chunk_rows rows (at most 8) with its GEMMs on the strategy's
// share of the multiprocessors, everything else on the compute stream; with one rank or too few
// rows for two chunks nothing is fused.
TEST(Scheduler, SingleBatchPipelinesEachRowParallelPairInRowChunks) {
  for (const auto& [name, rows, group, chunks, percent] :
       std::vector<std::tuple<std::string, int64_t, int, int, int>>{
           {"single_batch", 4096, 2, 4, 100},
           {"single_batch", 4096, 1, 1, 100},
           {"single_batch", 2047, 4, 1, 100},
           {"single_batch:100", 250, 2, 2, 100},
           {"single_batch:1:75", 4096, 2, 8, 75}}) {
    SCOPED_TRACE(str(name, " on ", rows, " rows, group of ", group));
    std::vector<std::pair<model::LlamaOp, int>> fused;
    std::vector<sched::Placement> placed;
    sched::ScheduleContext ctx(
        2, {{0, 1, 0, rows}},
        [&](const sched::NanoBatch&, sched::Step, const sched::Placement& p) {
          placed.push_back(p);
        },
        [&](const sched::NanoBatch&, sched::Step first, model::FusedGroup g,
            const sched::FusedOptions& how) {
          EXPECT_EQ(g, model::FusedGroup::kRowParallelPipelined);
          EXPECT_EQ(how.gemm_sm_percent, percent);
          fused.push_back({first.op, how.chunks});
        },
        group);
    const auto strategy = sched::make_strategy(name);
    EXPECT_EQ(strategy->name(), name);
    EXPECT_EQ(strategy->split(batch_of({rows})).size(), 1u);
    strategy->schedule(ctx);
    EXPECT_TRUE(ctx.finished());
    using model::LlamaOp;
    const std::vector<std::pair<LlamaOp, int>> want =
        chunks == 1 ? std::vector<std::pair<LlamaOp, int>>{}
                    : std::vector<std::pair<LlamaOp, int>>{{LlamaOp::kOProj, chunks},
                                                           {LlamaOp::kDown, chunks},
                                                           {LlamaOp::kOProj, chunks},
                                                           {LlamaOp::kDown, chunks}};
    EXPECT_EQ(fused, want);
    EXPECT_EQ(placed.size(), size_t(2 * model::kLlamaOps) - 2 * want.size());
    for (const sched::Placement& p : placed) EXPECT_EQ(p.stream, model::OpKind::kCompute);
  }
  for (const char* bad : {"single_batch:0", "single_batch:", "single_batch:x", "single_batch:8k",
                          "single_batch:1048577", "single_batch:8:0", "single_batch:8:101",
                          "single_batch:8:", "single_batch:8:50:1", "single_batch:8;50"})
    expect_error([&] { sched::make_strategy(bad); }, ErrorCode::kInvalidArgument,
                 {str("strategy = '", bad, "'"), "rows of a chunk, 1 to 1048576",
                  "share of the multiprocessors, 1 to 100"});
  EXPECT_EQ(sched::make_strategy("single_batch:1024:100")->name(), "single_batch");
  EXPECT_EQ(sched::make_strategy("single_batch:1024:60")->name(), "single_batch:1024:60");
}

}  // namespace
}  // namespace tessera::testing
