// LlamaGpuModel (bf16 on the GPU) against LlamaModel (the float32 cpu reference) on the same
// random weights: prefill logits and teacher-forced decode steps within bf16 tolerance, a
// batch mixing prefills and decodes, CUDA-graph replay bitwise equal to eager steps, the same
// bits run to run, and the refusals; tensor parallel over two GPUs (NCCL all-reduce) against
// the same reference, every rank with the same logits. Scheduled steps (a strategy's
// nano-batches on three streams) against unscheduled ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "gpu_workers.h"
#include "tessera/comm/context.h"
#include "tessera/core/error.h"
#include "tessera/model/llama_gpu_model.h"
#include "tessera/model/llama_model.h"
#include "tessera/sched/schedule.h"
#include "tessera/sched/timeline.h"

namespace tessera::model {
namespace {

constexpr uint64_t kSeed = 11;

// head_dim 64: decode through the split-KV kernel; 128: decode-only steps through the fused
// attention-block kernel.
DecoderConfig small_config(bool qkv_bias = false, int64_t head_dim = 64) {
  DecoderConfig c;
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 256 / head_dim;
  c.num_key_value_heads = c.num_attention_heads / 2;
  c.head_dim = head_dim;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.qkv_bias = qkv_bias;
  return c;
}

LlamaGpuOptions small_options(bool graphs = true) {
  LlamaGpuOptions o;
  o.fused_decode = true;  // taken where the model allows it (head_dim 128)
  o.cache = {16, 64};
  o.max_tokens = 256;
  o.max_batch = 8;
  o.max_context = 256;
  o.max_logit_rows = 256;
  o.cuda_graphs = graphs;
  return o;
}

// bf16 weights and activations against float32: within a few percent of the largest logit.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float largest = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    largest = std::max(largest, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(worst, 0.03f * largest) << what << ": largest |logit| " << largest;
}

class LlamaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(LlamaGpu, PrefillAndDecodeMatchTheFloat32Reference) {
  for (const auto& [bias, head_dim] : {std::pair{false, 64}, {true, 64}, {false, 128}}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim << (bias ? " qkv bias" : ""));
    const DecoderConfig config = small_config(bias, head_dim);
    LlamaModel ref(config, random_llama_weights(config, kSeed, 0, 1), {16, 64}, nullptr);
    LlamaGpuModel gpu(config, random_llama_source(kSeed), small_options(), nullptr);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 37; ++i) prompt.push_back((i * 53 + 7) % config.vocab_size);
    SequenceTokens r{ref.add_sequence(), prompt}, g{gpu.add_sequence(), prompt};
    std::vector<float> want = ref.forward(std::span(&r, 1));
    expect_close(gpu.forward(std::span(&g, 1), LogitRows::kAll), want,
                 bias ? "prefill (qkv bias)" : "prefill");
    // Teacher-forced decode: both models get the reference's greedy token, so a near-tie cannot
    // send them down different paths.
    for (int step = 0; step < 6; ++step) {
      const auto last = want.end() - config.vocab_size;
      r.tokens = g.tokens = {int32_t(std::max_element(last, want.end()) - last)};
      want = ref.forward(std::span(&r, 1));
      expect_close(gpu.forward(std::span(&g, 1)), want, "decode step");
    }
  }
}

TEST_F(LlamaGpu, MixedBatchMatchesTheReference) {
  const DecoderConfig config = small_config();
  LlamaGpuModel mixed(config, random_llama_source(kSeed), small_options(), nullptr);
  LlamaModel ref(config, random_llama_weights(config, kSeed, 0, 1), {16, 64}, nullptr);
  // A sequence in decode between new prompts of different lengths, in one forward: prompt b
  // alone, prompts c and d adjacent (one varlen launch of two sequences).
  std::vector<int32_t> a_prompt(20), b_prompt(5), c_prompt(33), d_prompt(70);
  for (size_t i = 0; i < a_prompt.size(); ++i) a_prompt[i] = int32_t(i * 7 % 512);
  for (size_t i = 0; i < b_prompt.size(); ++i) b_prompt[i] = int32_t(i * 11 % 512);
  for (size_t i = 0; i < c_prompt.size(); ++i) c_prompt[i] = int32_t(i * 13 % 512);
  for (size_t i = 0; i < d_prompt.size(); ++i) d_prompt[i] = int32_t(i * 17 % 512);
  SequenceTokens ga{mixed.add_sequence(), a_prompt}, ra{ref.add_sequence(), a_prompt};
  mixed.forward(std::span(&ga, 1));
  ref.forward(std::span(&ra, 1));
  ga.tokens = ra.tokens = {42};
  std::vector<SequenceTokens> g = {{mixed.add_sequence(), b_prompt},
                                   ga,
                                   {mixed.add_sequence(), c_prompt},
                                   {mixed.add_sequence(), d_prompt}};
  std::vector<SequenceTokens> r = {{ref.add_sequence(), b_prompt},
                                   ra,
                                   {ref.add_sequence(), c_prompt},
                                   {ref.add_sequence(), d_prompt}};
  expect_close(mixed.forward(g, LogitRows::kAll), ref.forward(r), "mixed batch");
}

// Chunked prefill: a prompt in three chunks (37, 20, 1 then 45 tokens after cached ones), in
// batches beside a new prompt, a decode and another sequence's chunk, against the reference
// fed the same chunks; then decode steps over the chunked sequence's cache.
TEST_F(LlamaGpu, ChunkedPrefillMatchesTheReference) {
  for (const int64_t head_dim : {64, 128}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim);
    const DecoderConfig config = small_config(false, head_dim);
    LlamaGpuModel gpu(config, random_llama_source(kSeed), small_options(), nullptr);
    LlamaModel ref(config, random_llama_weights(config, kSeed, 0, 1), {16, 64}, nullptr);
    auto tokens = [](int n, int salt) {
      std::vector<int32_t> t(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) t[size_t(i)] = (i * 29 + salt * 11) % 512;
      return t;
    };
    const int64_t a_gpu = gpu.add_sequence(), a_ref = ref.add_sequence();
    const int64_t b_gpu = gpu.add_sequence(), b_ref = ref.add_sequence();
    // Step 1: a's first chunk and b's prompt.
    std::vector<SequenceTokens> g = {{a_gpu, tokens(37, 1)}, {b_gpu, tokens(12, 2)}};
    std::vector<SequenceTokens> r = {{a_ref, tokens(37, 1)}, {b_ref, tokens(12, 2)}};
    expect_close(gpu.forward(g, LogitRows::kAll), ref.forward(r), "first chunks");
    // Step 2: c's prompt, a's second chunk (20 after 37) and b's decode in one batch.
    const int64_t c_gpu = gpu.add_sequence(), c_ref = ref.add_sequence();
    g = {{c_gpu, tokens(9, 3)}, {a_gpu, tokens(20, 4)}, {b_gpu, {7}}};
    r = {{c_ref, tokens(9, 3)}, {a_ref, tokens(20, 4)}, {b_ref, {7}}};
    expect_close(gpu.forward(g, LogitRows::kAll), ref.forward(r), "chunk after cached tokens");
    // Step 3: two chunks after cached tokens side by side (a: 45 after 57, b: 30 after 13).
    g = {{a_gpu, tokens(45, 5)}, {b_gpu, tokens(30, 6)}};
    r = {{a_ref, tokens(45, 5)}, {b_ref, tokens(30, 6)}};
    expect_close(gpu.forward(g, LogitRows::kAll), ref.forward(r), "two chunks");
    // Decode steps over the chunked caches.
    for (int step = 0; step < 3; ++step) {
      g = {{a_gpu, {int32_t(step + 1)}}, {b_gpu, {int32_t(step + 2)}}, {c_gpu, {int32_t(step + 3)}}};
      r = {{a_ref, {int32_t(step + 1)}}, {b_ref, {int32_t(step + 2)}}, {c_ref, {int32_t(step + 3)}}};
      expect_close(gpu.forward(g), ref.forward(r), "decode after chunks");
    }
  }
}

TEST_F(LlamaGpu, GraphReplayIsBitwiseTheEagerStepAndRunsRepeat) {
  for (const int64_t head_dim : {64, 128}) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << head_dim);
    const DecoderConfig config = small_config(false, head_dim);
    std::vector<std::vector<float>> runs;
    for (const bool graphs : {false, true, true}) {
      LlamaGpuModel m(config, random_llama_source(kSeed), small_options(graphs), nullptr);
      std::vector<SequenceTokens> in;
      for (int s = 0; s < 3; ++s) {
        std::vector<int32_t> prompt;
        for (int i = 0; i < 9 + 4 * s; ++i) prompt.push_back((i * 31 + s) % config.vocab_size);
        in.push_back({m.add_sequence(), prompt});
      }
      std::vector<float> all = m.forward(in);
      for (int step = 0; step < 8; ++step) {  // steps 0 and 1 eager, then captured and replayed
        for (auto& s : in) s.tokens = {int32_t((step * 17 + s.seq_id) % config.vocab_size)};
        const std::vector<float> logits = m.forward(in);
        all.insert(all.end(), logits.begin(), logits.end());
      }
      runs.push_back(std::move(all));
    }
    EXPECT_TRUE(runs[0] == runs[1]) << "graph replay differs from eager steps";
    EXPECT_TRUE(runs[1] == runs[2]) << "two runs differ";
  }
}

// A strategy's nano-batches on the compute, memory and network streams: sequential is the
// unscheduled step bitwise (one nano-batch, the same kernels); nanoflow (its GEMMs on all the
// multiprocessors, or on 60% of them beside the other nano-batch's attention) and dual_batch
// split a mixed batch in two and match it within bf16 rounding (the GEMM plans see other row
// counts),
// as does tokenweave (its fused group is the all-reduce and the norm without a group), and
// single_batch (one rank: nothing to pipeline, sequential's order), and dual_batch on a
// partition (the context runs the other steps); their decode steps replay from graphs bitwise
// their eager ones.
TEST_F(LlamaGpu, StrategiesMatchTheUnscheduledStep) {
  const DecoderConfig config = small_config();
  // A decode next to two prompts (91 rows: nanoflow splits from 64), then 6 decode steps of the
  // three; every logit of every step.
  auto run = [&](const sched::Strategy* strategy, bool graphs) {
    LlamaGpuModel m(config, random_llama_source(kSeed), small_options(graphs), nullptr);
    std::vector<int32_t> a_prompt(20), b_prompt(40), c_prompt(50);
    for (size_t i = 0; i < a_prompt.size(); ++i) a_prompt[i] = int32_t(i * 7 % 512);
    for (size_t i = 0; i < b_prompt.size(); ++i) b_prompt[i] = int32_t(i * 11 % 512);
    for (size_t i = 0; i < c_prompt.size(); ++i) c_prompt[i] = int32_t(i * 13 % 512);
    SequenceTokens a{m.add_sequence(), a_prompt};
    m.forward(std::span(&a, 1));
    a.tokens = {42};
    std::vector<SequenceTokens> in = {{m.add_sequence(), b_prompt}, a, {m.add_sequence(), c_prompt}};
    std::vector<float> all = m.forward(in, LogitRows::kAll, strategy);
    for (int step = 0; step < 6; ++step) {
      for (auto& s : in) s.tokens = {int32_t((step * 17 + s.seq_id) % config.vocab_size)};
      const std::vector<float> logits = m.forward(in, LogitRows::kLast, strategy);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  const std::vector<float> plain = run(nullptr, true);
  for (const char* name : {"sequential", "nanoflow", "nanoflow:60", "dual_batch", "single_batch:8",
                           "tokenweave", "dual_batch@layers=1/ops=attention+o_proj"}) {
    SCOPED_TRACE(name);
    const auto strategy = sched::make_strategy(name);
    const std::vector<float> eager = run(strategy.get(), false), graphed = run(strategy.get(), true);
    EXPECT_TRUE(eager == graphed) << "graph replay of the scheduled steps differs from eager";
    if (std::string(name) == "sequential") {
      EXPECT_TRUE(graphed == plain) << "sequential differs from the unscheduled step";
    } else {
      float largest = 0, worst = 0;
      ASSERT_EQ(graphed.size(), plain.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        largest = std::max(largest, std::fabs(plain[i]));
        worst = std::max(worst, std::fabs(graphed[i] - plain[i]));
      }
      EXPECT_LE(worst, 0.01f * largest) << "largest |logit| " << largest;
    }
  }
}

// set_timeline: a scheduled step runs eagerly with each operation timed on its stream: a span
// per operation of each nano-batch, attention on the memory stream, times from the fork on; the
// logits are those of the step without a timeline, and every step replaces the spans.
TEST_F(LlamaGpu, TheTimelineTimesEveryOperationOnItsStream) {
  const DecoderConfig config = small_config();
  const auto nanoflow = sched::make_strategy("nanoflow");
  auto run = [&](sched::Timeline* timeline) {
    LlamaGpuModel m(config, random_llama_source(kSeed), small_options(true), nullptr);
    m.set_timeline(timeline);
    std::vector<int32_t> b_prompt(40, 3), c_prompt(51, 5);  // 91 rows: two nano-batches
    std::vector<SequenceTokens> in = {{m.add_sequence(), b_prompt}, {m.add_sequence(), c_prompt}};
    std::vector<float> all = m.forward(in, LogitRows::kAll, nanoflow.get());
    if (timeline) {
      const int64_t ops = config.num_hidden_layers * model::kLlamaOps;
      EXPECT_EQ(int64_t(timeline->spans.size()), 2 * ops);
      for (const sched::TimelineSpan& span : timeline->spans) {
        EXPECT_GE(span.start_us, 0.0);
        EXPECT_LE(span.start_us, span.end_us);
        if (span.step.op == model::LlamaOp::kAttention)
          EXPECT_EQ(span.stream, model::OpKind::kMemory);
      }
    }
    for (auto& s : in) s.tokens = {7};
    const std::vector<float> decode = m.forward(in, LogitRows::kLast, nanoflow.get());
    all.insert(all.end(), decode.begin(), decode.end());
    // The decode step: two rows, one nano-batch, replacing the prefill's spans.
    if (timeline)
      EXPECT_EQ(int64_t(timeline->spans.size()), config.num_hidden_layers * model::kLlamaOps);
    return all;
  };
  sched::Timeline timeline;
  EXPECT_TRUE(run(&timeline) == run(nullptr));
}

TEST_F(LlamaGpu, RefusesWhatItDoesNotRunNamingIt) {
  const DecoderConfig config = small_config();
  LlamaGpuModel m(config, random_llama_source(kSeed), small_options(), nullptr);
  SequenceTokens s{m.add_sequence(), {1, 2, 3}};
  m.forward(std::span(&s, 1));
  s.tokens = std::vector<int32_t>(254, 4);  // 3 cached + 254 > max_context 256
  try {
    m.forward(std::span(&s, 1));
    ADD_FAILURE() << "a chunk past max_context ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_context"), std::string::npos) << e.what();
  }
  SequenceTokens long_one{m.add_sequence(), std::vector<int32_t>(257, 1)};
  try {
    m.forward(std::span(&long_one, 1));
    ADD_FAILURE() << "a prompt past max_context ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_context"), std::string::npos) << e.what();
  }
  SequenceTokens bad{m.add_sequence(), {512}};
  EXPECT_THROW(m.forward(std::span(&bad, 1)), Error);
}

// Tensor parallel over two ranks, one GPU each: the sharded heads and MLP columns, row-parallel
// projections all-reduced by NCCL. Prefill and teacher-forced decode of two sequences against
// the float32 reference; rank 1's logits bitwise rank 0's; decode steps replayed from CUDA
// graphs (all-reduces captured) bitwise the eager ones.
TEST(LlamaGpuTp, TwoRanksMatchTheReference) {
  TESSERA_REQUIRE_GPUS(testing::gpus_for_test(2), 2);
  testing::run_gpu_workers("LlamaGpuTpWorker", "TwoRanksMatchTheReference", 2, 120000);
}

TEST(LlamaGpuTpWorker, TwoRanksMatchTheReference) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by LlamaGpuTp.*";
  ContextOptions context_options;
  context_options.create_heap = false;
  auto ctx = create_cuda_context(bootstrap_from_launch(detect_launch()), context_options);
  const DecoderConfig config = small_config();
  // Rank 0's logits, broadcast, must be this rank's bit for bit.
  auto expect_same_on_every_rank = [&](const std::vector<float>& mine, const char* what) {
    std::vector<float> first = mine;
    ctx->bootstrap->broadcast(first.data(), first.size() * sizeof(float), 0);
    EXPECT_EQ(std::memcmp(first.data(), mine.data(), mine.size() * sizeof(float)), 0)
        << what << ": rank " << ctx->rank << " differs from rank 0";
  };
  // Prefill two prompts, then six teacher-forced decode steps of both (with graphs: steps 0
  // eager, 1 captured, 2-5 replayed, all-reduces included); returns every logit.
  auto run = [&](bool graphs, const sched::Strategy* strategy) {
    LlamaModel ref(config, random_llama_weights(config, kSeed, 0, 1), {16, 64}, nullptr);
    LlamaGpuOptions options = small_options(graphs);
    options.device = ctx->device.index;
    LlamaGpuModel gpu(config, random_llama_source(kSeed), options, ctx->world.get());
    std::vector<int32_t> a_prompt(29), b_prompt(12);
    for (size_t i = 0; i < a_prompt.size(); ++i) a_prompt[i] = int32_t((i * 53 + 7) % 512);
    for (size_t i = 0; i < b_prompt.size(); ++i) b_prompt[i] = int32_t((i * 19 + 3) % 512);
    std::vector<SequenceTokens> g = {{gpu.add_sequence(), a_prompt},
                                     {gpu.add_sequence(), b_prompt}};
    std::vector<SequenceTokens> r = {{ref.add_sequence(), a_prompt},
                                     {ref.add_sequence(), b_prompt}};
    std::vector<float> want = ref.forward(r);
    std::vector<float> all = gpu.forward(g, LogitRows::kAll, strategy);
    expect_close(all, want, "tp prefill");
    expect_same_on_every_rank(all, "tp prefill");
    // Teacher-forced: each sequence's next token is the reference's argmax of its last row.
    std::vector<int64_t> last_rows = {int64_t(a_prompt.size()) - 1,
                                      int64_t(a_prompt.size() + b_prompt.size()) - 1};
    for (int step = 0; step < 6; ++step) {
      for (size_t s = 0; s < g.size(); ++s) {
        const auto row = want.begin() + std::ptrdiff_t(last_rows[s] * config.vocab_size);
        g[s].tokens = r[s].tokens = {int32_t(std::max_element(row, row + config.vocab_size) - row)};
        last_rows[s] = int64_t(s);
      }
      want = ref.forward(r);
      const std::vector<float> got = gpu.forward(g, LogitRows::kLast, strategy);
      expect_close(got, want, "tp decode step");
      expect_same_on_every_rank(got, "tp decode step");
      all.insert(all.end(), got.begin(), got.end());
    }
    return all;
  };
  const std::vector<float> eager = run(false, nullptr);
  EXPECT_TRUE(eager == run(true, nullptr))
      << "rank " << ctx->rank << ": graph replay under tensor parallelism differs from eager";
  // Dual-batch overlap: each nano-batch's all-reduces on the network stream beside the other's
  // compute, captured in the decode graphs with them; the checks inside run() apply.
  // TokenWeave: each all-reduce and the norm after it as reduce-scatter, the norm on this
  // rank's rows, all-gathers (where a nano-batch's rows divide by 2; the all-reduce elsewhere).
  // Single-batch overlap: each row-parallel GEMM and its all-reduce in row chunks of one row
  // (at most 8; the decode steps' two rows in two), the chunks' all-reduces on the network
  // stream beside the next chunk's GEMM.
  for (const char* name : {"dual_batch", "tokenweave", "single_batch:1"}) {
    const auto strategy = sched::make_strategy(name);
    EXPECT_TRUE(run(false, strategy.get()) == run(true, strategy.get()))
        << "rank " << ctx->rank << ": " << name
        << ": scheduled graph replay under tensor parallelism differs";
  }
  ctx->bootstrap->barrier();
  std::fflush(stdout);
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
}

}  // namespace
}  // namespace tessera::model
