// LlamaModel on one rank (cpu, float32) with the tiny random model: a packed prefill of
// sequences of lengths 5 and 9 equals running them one at a time; decode after prefill equals
// the prefill of the longer sequence (last-token logits), alone and batched; greedy generation
// is deterministic and equals argmax over forward(); Qwen2's q/k/v biases and weights read from
// a safetensors file give the same model; bad configurations and inputs are refused naming the
// field.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "llama_test_util.h"
#include "tessera/core/error.h"
#include "tessera/model/llama_model.h"
#include "tessera/model/llama_shapes.h"
#include "tessera/model/safetensors.h"

namespace tessera::model {
namespace {

using testing::expect_logits_near;
using testing::test_tokens;
using testing::tiny_llama_config;

constexpr uint64_t kSeed = 2026;
constexpr double kTolerance = 1e-5;  // float32 noise of the same math in another order

LlamaModel tiny_model(const DecoderConfig& config = tiny_llama_config(),
                      KvCacheSize cache = {4, 64}) {
  return LlamaModel(config, random_llama_weights(config, kSeed, 0, 1), cache, nullptr);
}

std::vector<float> rows(const std::vector<float>& logits, int64_t first, int64_t count,
                        int64_t vocab = 97) {
  return std::vector<float>(logits.begin() + first * vocab,
                            logits.begin() + (first + count) * vocab);
}

// Logits of `tokens` prefilled alone in a fresh sequence of `model`.
std::vector<float> prefill_alone(LlamaModel& model, const std::vector<int32_t>& tokens) {
  const SequenceTokens in{model.add_sequence(), tokens};
  return model.forward(std::span(&in, 1));
}

TEST(LlamaModel, PackedPrefillMatchesOneSequenceAtATime) {
  for (const bool qkv_bias : {false, true}) {
    DecoderConfig config = tiny_llama_config();
    config.qkv_bias = qkv_bias;  // Qwen2-style
    LlamaModel batched = tiny_model(config), single = tiny_model(config);
    const std::vector<int32_t> a = test_tokens(5, 1), b = test_tokens(9, 2);
    const SequenceTokens inputs[] = {{batched.add_sequence(), a}, {batched.add_sequence(), b}};
    const std::vector<float> logits = batched.forward(inputs);
    ASSERT_EQ(logits.size(), size_t(14 * 97));
    const std::string what = qkv_bias ? "qkv_bias " : "";
    expect_logits_near(rows(logits, 0, 5), prefill_alone(single, a), kTolerance, what + "seq 5");
    expect_logits_near(rows(logits, 5, 9), prefill_alone(single, b), kTolerance, what + "seq 9");
  }
}

TEST(LlamaModel, DecodeAfterPrefillMatchesPrefillOfTheLongerSequence) {
  LlamaModel model = tiny_model();
  const std::vector<int32_t> full = test_tokens(13, 3);
  const std::vector<int32_t> prompt(full.begin(), full.begin() + 9);
  const int64_t seq = model.add_sequence();
  SequenceTokens in{seq, prompt};
  model.forward(std::span(&in, 1));
  // Page size 4: the decode steps cross a page boundary at position 12.
  for (int64_t pos = 9; pos < 13; ++pos) {
    in.tokens = {full[size_t(pos)]};
    const std::vector<float> decoded = model.forward(std::span(&in, 1));
    LlamaModel reference = tiny_model();
    const std::vector<float> prefilled =
        prefill_alone(reference, std::vector<int32_t>(full.begin(), full.begin() + pos + 1));
    expect_logits_near(decoded, rows(prefilled, pos, 1), kTolerance,
                       "decode at position " + std::to_string(pos));
  }
  EXPECT_EQ(model.cache().length(seq), 13);
}

TEST(LlamaModel, BatchedDecodeMatchesSingleDecode) {
  LlamaModel batched = tiny_model(), single = tiny_model();
  const std::vector<int32_t> a = test_tokens(5, 4), b = test_tokens(9, 5);
  SequenceTokens inputs[] = {{batched.add_sequence(), a}, {batched.add_sequence(), b}};
  batched.forward(inputs);
  SequenceTokens alone[] = {{single.add_sequence(), a}, {single.add_sequence(), b}};
  single.forward(std::span(&alone[0], 1));
  single.forward(std::span(&alone[1], 1));
  for (int step = 0; step < 3; ++step) {
    inputs[0].tokens = alone[0].tokens = {int32_t(10 + step)};
    inputs[1].tokens = alone[1].tokens = {int32_t(50 + step)};
    const std::vector<float> logits = batched.forward(inputs);
    expect_logits_near(rows(logits, 0, 1), single.forward(std::span(&alone[0], 1)), kTolerance,
                       "seq a step " + std::to_string(step));
    expect_logits_near(rows(logits, 1, 1), single.forward(std::span(&alone[1], 1)), kTolerance,
                       "seq b step " + std::to_string(step));
  }
}

TEST(LlamaModel, GreedyGenerationIsArgmaxOfForwardAndDeterministic) {
  LlamaModel model = tiny_model();
  const std::vector<int32_t> prompt = test_tokens(6, 6);
  const std::vector<int32_t> tokens = model.generate_greedy(prompt, 8);
  ASSERT_EQ(tokens.size(), 8u);
  EXPECT_EQ(model.cache().free_pages(), 64);  // the sequence was released
  EXPECT_EQ(model.generate_greedy(prompt, 8), tokens);

  LlamaModel manual = tiny_model();
  SequenceTokens in{manual.add_sequence(), prompt};
  for (int32_t expected : tokens) {
    const std::vector<float> logits = manual.forward(std::span(&in, 1));
    const auto last = logits.end() - 97;
    const int32_t next = int32_t(std::max_element(last, logits.end()) - last);
    EXPECT_EQ(next, expected);
    in.tokens = {next};
  }
}

TEST(LlamaModel, WeightsFromASafetensorsFileGiveTheSameModel) {
  const DecoderConfig config = tiny_llama_config();
  const LlamaWeights w = random_llama_weights(config, kSeed, 0, 1);
  // Hugging Face names and [out, in] shapes, as a checkpoint stores them.
  std::vector<NamedTensor> entries;
  const auto add = [&](const std::string& name, const std::vector<float>& data,
                       const std::vector<int64_t>& shape) {
    entries.push_back(
        {name, TensorView::contiguous(const_cast<float*>(data.data()), DType::kF32, Device::cpu(),
                                      shape.data(), int(shape.size()))});
  };
  const int64_t c = 64, v = 97;
  add("model.embed_tokens.weight", w.embed, {v, c});
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const LlamaLayerWeights& l = w.layers[i];
    add(p + "input_layernorm.weight", l.input_norm, {c});
    add(p + "self_attn.q_proj.weight", l.q, {64, c});
    add(p + "self_attn.k_proj.weight", l.k, {32, c});
    add(p + "self_attn.v_proj.weight", l.v, {32, c});
    add(p + "self_attn.o_proj.weight", l.o, {c, 64});
    add(p + "post_attention_layernorm.weight", l.post_norm, {c});
    add(p + "mlp.gate_proj.weight", l.gate, {128, c});
    add(p + "mlp.up_proj.weight", l.up, {128, c});
    add(p + "mlp.down_proj.weight", l.down, {c, 128});
  }
  add("model.norm.weight", w.final_norm, {c});
  add("lm_head.weight", w.lm_head, {v, c});
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tessera_llama_tiny_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  write_safetensors(path, entries);
  const WeightStore store = WeightStore::open(path);

  LlamaModel from_file(config, load_llama_weights(config, store, 0, 1), {4, 64}, nullptr);
  LlamaModel random = tiny_model();
  const std::vector<int32_t> tokens = test_tokens(7, 7);
  EXPECT_EQ(prefill_alone(from_file, tokens), prefill_alone(random, tokens));
  std::filesystem::remove(path);
}

template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected " << error_code_name(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(LlamaConfig, BadValuesAreRefusedNamingTheField) {
  const auto refused = [](auto&& edit, int ranks, std::vector<std::string> parts,
                          ErrorCode code = ErrorCode::kInvalidArgument) {
    DecoderConfig c = tiny_llama_config();
    edit(c);
    expect_error([&] { llama_shapes(c, 0, ranks); }, code, parts);
  };
  refused([](DecoderConfig&) {}, 3, {"num_attention_heads = 4", "3 tensor-parallel ranks"});
  refused([](DecoderConfig& c) { c.num_attention_heads = 6, c.num_key_value_heads = 3; }, 2,
          {"num_key_value_heads = 3", "2 tensor-parallel ranks"});
  refused([](DecoderConfig& c) { c.num_key_value_heads = 4, c.intermediate_size = 130; }, 4,
          {"intermediate_size = 130"});
  refused([](DecoderConfig& c) { c.num_key_value_heads = 3; }, 1,
          {"num_key_value_heads = 3", "divide num_attention_heads = 4"});
  refused([](DecoderConfig& c) { c.hidden_size = 0; }, 1, {"hidden_size = 0"});
  refused([](DecoderConfig& c) { c.vocab_size = -1; }, 1, {"vocab_size = -1"});
  refused([](DecoderConfig& c) { c.head_dim = 15; }, 1, {"head_dim = 15", "even"});
  refused([](DecoderConfig& c) { c.rms_norm_eps = 0; }, 1, {"rms_norm_eps"});
  refused([](DecoderConfig&) {}, 0, {"ranks = 0"});
  refused([](DecoderConfig& c) { c.o_bias = true; }, 1, {"o_bias"}, ErrorCode::kUnsupported);
  refused([](DecoderConfig& c) { c.mlp_bias = true; }, 1, {"mlp_bias"}, ErrorCode::kUnsupported);
  expect_error([] { llama_shapes(tiny_llama_config(), 2, 2); }, ErrorCode::kInvalidArgument,
               {"rank = 2"});
  // Fewer KV heads than ranks: each is replicated on P / Hkv ranks.
  const LlamaShapes s = llama_shapes(tiny_llama_config(), 3, 4);
  EXPECT_EQ(s.q_heads, 1);
  EXPECT_EQ(s.kv_heads, 1);
  EXPECT_EQ(s.kv_head_begin, 1);
  // The weights and the model check through the same function.
  DecoderConfig c = tiny_llama_config();
  c.num_attention_heads = 6;
  expect_error([&] { random_llama_weights(c, kSeed, 0, 4); }, ErrorCode::kInvalidArgument,
               {"num_attention_heads = 6"});
}

TEST(LlamaModel, BadInputsAreRefusedAndCacheNothing) {
  LlamaModel model = tiny_model(tiny_llama_config(), {4, 3});
  const int64_t seq = model.add_sequence();
  SequenceTokens in{seq, {1, 97}};
  expect_error([&] { model.forward(std::span(&in, 1)); }, ErrorCode::kInvalidArgument,
               {"inputs[0].tokens[1] = 97", "[0, 97)"});
  in.tokens = test_tokens(13, 1);  // 4 pages of 4, 3 in the cache
  expect_error([&] { model.forward(std::span(&in, 1)); }, ErrorCode::kInvalidArgument,
               {"out of KV cache pages", "needs 4", "3 of 3"});
  EXPECT_EQ(model.cache().length(seq), 0);
  EXPECT_EQ(model.cache().free_pages(), 3);
  const SequenceTokens twice[] = {{seq, {1}}, {seq, {2}}};
  expect_error([&] { model.forward(twice); }, ErrorCode::kInvalidArgument,
               {"inputs[1].seq_id", "repeated"});
  in.seq_id = 42;
  expect_error([&] { model.forward(std::span(&in, 1)); }, ErrorCode::kInvalidArgument,
               {"seq_id = 42"});
  expect_error([&] { model.generate_greedy({}, 2); }, ErrorCode::kInvalidArgument, {"prompt"});
}

}  // namespace
}  // namespace tessera::model
