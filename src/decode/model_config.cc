// The model configurations of model_config.h and their RoPE frequencies.
#include "tessera/decode/model_config.h"

#include <cmath>

#include "tessera/core/error.h"

namespace tessera::decode {

ModelConfig ModelConfig::llama2_7b() {
  ModelConfig c;
  c.name = "llama2-7b";
  c.hidden = 4096;
  c.num_heads = c.num_kv_heads = 32;
  c.head_dim = 128;
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-5f;
  return c;
}

ModelConfig ModelConfig::llama3_8b() {
  ModelConfig c;
  c.name = "llama3-8b";
  c.hidden = 4096;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  c.rope_scaling = {8.0f, 1.0f, 4.0f, 8192};
  c.rms_norm_eps = 1e-5f;
  return c;
}

ModelConfig ModelConfig::deepseek_v2_lite() {
  ModelConfig c;
  c.name = "deepseek-v2-lite";
  c.kind = AttentionKind::kLatent;
  c.hidden = 2048;
  c.num_heads = 16;
  c.num_kv_heads = 1;  // one latent KV head shared by every query head (MQA)
  c.kv_lora_rank = 512;
  c.rope_head_dim = 64;
  c.nope_head_dim = 128;
  c.v_head_dim = 128;
  c.head_dim = c.nope_head_dim + c.rope_head_dim;
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-6f;
  return c;
}

std::vector<std::string> ModelConfig::known_names() {
  return {"llama2-7b", "llama3-8b", "deepseek-v2-lite"};
}

ModelConfig ModelConfig::by_name(std::string_view name, std::string_view what) {
  if (name == "llama2-7b") return llama2_7b();
  if (name == "llama3-8b") return llama3_8b();
  if (name == "deepseek-v2-lite") return deepseek_v2_lite();
  throw_error(ErrorCode::kInvalidArgument,
              str(what, " = '", name, "': expected one of llama2-7b, llama3-8b, deepseek-v2-lite"));
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t d = c.kind == AttentionKind::kLatent ? c.rope_head_dim : c.head_dim;
  std::vector<float> out(d / 2);
  const RopeScaling& s = c.rope_scaling;
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < d / 2; ++i) {
    double f = std::pow(double(c.rope_theta), -2.0 * i / d);
    if (s.factor > 0) {  // Llama 3: long wavelengths slowed by `factor`, a smooth band between
      const double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    out[i] = float(f);
  }
  return out;
}

}  // namespace tessera::decode
