// The attention-block shapes of the decoder models the decode kernels serve, as data: a
// struct per model rather than macros, so a new model is a new value, not a new build.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::decode {

enum class AttentionKind {
  kGrouped,  // MHA, GQA and MQA: num_kv_heads divides num_heads
  kLatent,   // DeepSeek's multi-head latent attention (MLA), decoded with absorbed weights
};

// Llama 3's "llama3" RoPE frequency scaling (factor 0: none).
struct RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position = 8192;
};

struct ModelConfig {
  std::string name;
  AttentionKind kind = AttentionKind::kGrouped;
  int64_t hidden = 0;        // model dimension
  int64_t num_heads = 0;     // query heads
  int64_t num_kv_heads = 0;  // key/value heads (kGrouped)
  int64_t head_dim = 0;      // per head (kGrouped)
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float rms_norm_eps = 1e-5f;
  // kLatent only: the compressed KV width, the rotary and non-rotary parts of a query/key head,
  // and a value head.
  int64_t kv_lora_rank = 0;
  int64_t rope_head_dim = 0;
  int64_t nope_head_dim = 0;
  int64_t v_head_dim = 0;

  int64_t group_size() const { return num_heads / num_kv_heads; }  // query heads per KV head

  static ModelConfig llama2_7b();         // MHA: 32 heads of 128, hidden 4096
  static ModelConfig llama3_8b();         // GQA 32:8, heads of 128, hidden 4096, llama3 RoPE
  static ModelConfig deepseek_v2_lite();  // MLA: hidden 2048, 16 heads, kv_lora_rank 512
  // "llama2-7b", "llama3-8b", "deepseek-v2-lite"; throws kInvalidArgument naming `what` and
  // the known names for anything else.
  static ModelConfig by_name(std::string_view name, std::string_view what = "model");
  static std::vector<std::string> known_names();
};

// RoPE inverse frequencies theta^(-2i/d) for i < d/2, with the config's scaling applied (as
// Hugging Face's _compute_llama3_parameters does). d = head_dim (kGrouped) or rope_head_dim.
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace tessera::decode
