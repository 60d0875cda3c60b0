// The tiny Llama-style model the model-runtime tests run: 2 layers, hidden 64, 4 heads of 16,
// 2 KV heads (GQA), intermediate 128, vocab 97, Llama 3 RoPE scaling; and a comparison of
// logits within float32 reduction-order noise.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/model/model_config.h"

namespace tessera::testing {

inline model::DecoderConfig tiny_llama_config() {
  model::DecoderConfig c;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 32;
  return c;
}

// Tokens of a test prompt: distinct per (salt, index), in [0, vocab).
inline std::vector<int32_t> test_tokens(int64_t count, int salt, int64_t vocab = 97) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < count; ++i) tokens.push_back(int32_t((i * 31 + salt * 17 + 3) % vocab));
  return tokens;
}

// |got - want| <= tolerance * (1 + |want|) elementwise; `what` names the comparison.
inline void expect_logits_near(const std::vector<float>& got, const std::vector<float>& want,
                               double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t worst_idx = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": element " << i << " = " << got[i];
    const double excess = std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
    if (excess > worst) worst = excess, worst_idx = i;
  }
  EXPECT_LE(worst, tolerance) << what << ": element " << worst_idx << " got " << got[worst_idx]
                              << ", want " << want[worst_idx];
}

}  // namespace tessera::testing
