// LlamaModel tensor parallel over 1, 2 and 4 rank threads of the cpu backend (heads and MLP
// columns split, o_proj and down_proj all-reduced): the tiny random model's logits of a packed
// prefill (lengths 5 and 9) and of batched decode steps match the single-rank run within
// float32 reduction-order noise, every rank returns the same logits, and greedy generation
// gives identical tokens (with and without Qwen2-style q/k/v biases, KV heads replicated at
// P = 4); a configuration P does not divide is refused on every rank naming the field.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "../unit/llama_test_util.h"
#include "cpu_dist_util.h"
#include "tessera/model/llama_model.h"

namespace tessera::testing {
namespace {

using model::LlamaModel;
using model::SequenceTokens;

constexpr uint64_t kSeed = 11;

struct RankRun {
  std::vector<float> prefill;               // [14, V]
  std::vector<std::vector<float>> decodes;  // per step [2, V]
  std::vector<int32_t> greedy;
};

RankRun run_rank(const model::DecoderConfig& config, RankContext& ctx) {
  LlamaModel m(config, model::random_llama_weights(config, kSeed, ctx.rank, ctx.size), {4, 64},
               ctx.size > 1 ? ctx.world.get() : nullptr);
  RankRun out;
  SequenceTokens inputs[] = {{m.add_sequence(), test_tokens(5, 1)},
                             {m.add_sequence(), test_tokens(9, 2)}};
  out.prefill = m.forward(inputs);
  for (int step = 0; step < 4; ++step) {
    inputs[0].tokens = {int32_t(7 * step + 1)};
    inputs[1].tokens = {int32_t(90 - step)};
    out.decodes.push_back(m.forward(inputs));
  }
  out.greedy = m.generate_greedy(test_tokens(6, 3), 10);
  return out;
}

std::vector<RankRun> run_ranks(const model::DecoderConfig& config, int ranks) {
  std::vector<RankRun> runs(static_cast<size_t>(ranks));
  run_cpu_ranks(ranks, 1, test_options(/*create_heap=*/false),
                [&](RankContext& ctx) { runs[size_t(ctx.rank)] = run_rank(config, ctx); });
  return runs;
}

void expect_tensor_parallel_matches_one_rank(const model::DecoderConfig& config);

TEST(LlamaTensorParallel, LogitsAndGreedyTokensMatchOneRank) {
  for (const bool qkv_bias : {false, true}) {  // Llama, then Qwen2-style q/k/v biases
    SCOPED_TRACE(qkv_bias ? "qkv_bias" : "no bias");
    model::DecoderConfig config = tiny_llama_config();
    config.qkv_bias = qkv_bias;
    expect_tensor_parallel_matches_one_rank(config);
  }
}

void expect_tensor_parallel_matches_one_rank(const model::DecoderConfig& config) {
  const RankRun single = run_ranks(config, 1)[0];
  ASSERT_EQ(single.prefill.size(), size_t(14 * 97));
  for (const int ranks : {2, 4}) {
    const std::vector<RankRun> runs = run_ranks(config, ranks);
    for (int r = 0; r < ranks; ++r) {
      const RankRun& run = runs[size_t(r)];
      const std::string who = std::to_string(ranks) + " ranks, rank " + std::to_string(r);
      // Every rank sums the same partials: its logits are rank 0's, bit for bit.
      EXPECT_EQ(run.prefill, runs[0].prefill) << who;
      // The partial sums of o_proj and down_proj are added in another order than one rank's
      // K loop: float32 noise, amplified by two layers.
      expect_logits_near(run.prefill, single.prefill, 1e-4, who + " prefill");
      ASSERT_EQ(run.decodes.size(), single.decodes.size());
      for (size_t s = 0; s < run.decodes.size(); ++s)
        expect_logits_near(run.decodes[s], single.decodes[s], 1e-4,
                           who + " decode step " + std::to_string(s));
      EXPECT_EQ(run.greedy, single.greedy) << who;
    }
  }
}

TEST(LlamaTensorParallel, SizesThatRanksDoNotDivideAreRefusedOnEveryRank) {
  model::DecoderConfig config = tiny_llama_config();
  expect_error([&] { run_ranks(config, 3); }, ErrorCode::kInvalidArgument,
               {"num_attention_heads = 4", "3 tensor-parallel ranks"});
  expect_error([&] { run_ranks(config, 4 * 2); }, ErrorCode::kInvalidArgument,
               {"num_attention_heads = 4"});
  config.num_attention_heads = 8, config.num_key_value_heads = 8, config.head_dim = 8;
  config.intermediate_size = 132;
  expect_error([&] { run_ranks(config, 8); }, ErrorCode::kInvalidArgument,
               {"intermediate_size = 132", "8 tensor-parallel ranks"});
}

}  // namespace
}  // namespace tessera::testing
