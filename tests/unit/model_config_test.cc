// config.json -> ModelConfig: the released configs of Llama 2 and 3, Qwen2.5, Flux.1 and
// CogVideoX read to the right values; bad fields are refused naming the field and what was
// expected; unknown architectures are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/core/error.h"
#include "tessera/model/model_config.h"

namespace tessera::model {
namespace {

// Llama-3-8B's config.json as published (fields the runtime ignores left in).
constexpr const char* kLlama3_8b = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

constexpr const char* kLlama2_7b = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
  "torch_dtype": "float16", "vocab_size": 32000})";

constexpr const char* kQwen25_05b = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

constexpr const char* kFluxDev = R"({
  "_class_name": "FluxTransformer2DModel", "_diffusers_version": "0.30.0.dev0",
  "attention_head_dim": 128, "guidance_embeds": true, "in_channels": 64,
  "joint_attention_dim": 4096, "num_attention_heads": 24, "num_layers": 19,
  "num_single_layers": 38, "patch_size": 1, "pooled_projection_dim": 768,
  "axes_dims_rope": [16, 56, 56]})";

constexpr const char* kCogVideoX2b = R"({
  "_class_name": "CogVideoXTransformer3DModel", "_diffusers_version": "0.30.0.dev0",
  "activation_fn": "gelu-approximate", "attention_bias": true, "attention_head_dim": 64,
  "dropout": 0.0, "flip_sin_to_cos": true, "freq_shift": 0, "in_channels": 16,
  "max_text_seq_length": 226, "norm_elementwise_affine": true, "norm_eps": 1e-05,
  "num_attention_heads": 30, "num_layers": 30, "out_channels": 16, "patch_size": 2,
  "sample_frames": 49, "sample_height": 60, "sample_width": 90,
  "spatial_interpolation_scale": 1.875, "temporal_compression_ratio": 4,
  "temporal_interpolation_scale": 1.0, "text_embed_dim": 4096, "time_embed_dim": 512,
  "timestep_activation_fn": "silu", "use_rotary_positional_embeddings": false})";

// The error message of parse_model_config(text), with its code checked.
std::string refusal(const std::string& text, ErrorCode code = ErrorCode::kInvalidArgument) {
  try {
    parse_model_config(text, "cfg.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

// kLlama3_8b with `field`'s value replaced by `value` (the JSON text), or removed if empty.
std::string llama3_with(const std::string& field, const std::string& value) {
  std::string text = kLlama3_8b;
  const std::string key = "\"" + field + "\": ";
  const size_t at = text.find(key);
  EXPECT_NE(at, std::string::npos) << field;
  size_t end = at + key.size();
  int depth = 0;
  while (end < text.size()) {
    const char c = text[end];
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') {
      if (depth == 0) break;
      --depth;
    }
    if (c == ',' && depth == 0) break;
    ++end;
  }
  if (value.empty()) {
    if (text[end] == ',') ++end;
    return text.erase(at, end - at);
  }
  return text.replace(at + key.size(), end - at - key.size(), value);
}

TEST(ModelConfig, ReadsLlama3WithItsRopeScaling) {
  const ModelConfig c = parse_model_config(kLlama3_8b);
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.dtype, DType::kBF16);
  const DecoderConfig& d = c.decoder;
  EXPECT_EQ(d.vocab_size, 128256);
  EXPECT_EQ(d.hidden_size, 4096);
  EXPECT_EQ(d.intermediate_size, 14336);
  EXPECT_EQ(d.num_hidden_layers, 32);
  EXPECT_EQ(d.num_attention_heads, 32);
  EXPECT_EQ(d.num_key_value_heads, 8);
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_EQ(d.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(d.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(d.rope_theta, 500000.0);
  EXPECT_TRUE(d.rope_scaling.llama3);
  EXPECT_DOUBLE_EQ(d.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(d.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(d.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(d.qkv_bias || d.o_bias || d.mlp_bias || d.tie_word_embeddings);
}

// transformers >= 5 writes RoPE's theta and scaling into "rope_parameters" (no top-level
// rope_theta): read before, they fell back to theta 10000 and no scaling, a silent wrong model
// found by bench/anchors/llama_reference.py.
TEST(ModelConfig, ReadsTransformers5RopeParameters) {
  const std::string base = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 97, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, )";
  const DecoderConfig d = parse_model_config(base + R"("rope_parameters": {"factor": 8.0,
    "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 32,
    "rope_theta": 500000.0, "rope_type": "llama3"}})").decoder;
  EXPECT_DOUBLE_EQ(d.rope_theta, 500000.0);
  EXPECT_TRUE(d.rope_scaling.llama3);
  EXPECT_DOUBLE_EQ(d.rope_scaling.factor, 8.0);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 32);
  const DecoderConfig plain = parse_model_config(
      base + R"("rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}})").decoder;
  EXPECT_DOUBLE_EQ(plain.rope_theta, 1000000.0);
  EXPECT_FALSE(plain.rope_scaling.llama3);
  try {
    parse_model_config(base + R"("rope_parameters": {"rope_type": "yarn", "factor": 4.0}})");
    ADD_FAILURE() << "yarn accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_parameters.rope_type = \"yarn\""),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelConfig, ReadsLlama2WithDefaults) {
  const ModelConfig c = parse_model_config(kLlama2_7b);
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_EQ(c.decoder.num_key_value_heads, 32);
  EXPECT_EQ(c.decoder.head_dim, 128);
  EXPECT_DOUBLE_EQ(c.decoder.rope_theta, 10000.0);  // absent: transformers' default
  EXPECT_FALSE(c.decoder.rope_scaling.llama3);      // null
  // num_key_value_heads absent: MHA.
  std::string no_kv = kLlama2_7b;
  no_kv.erase(no_kv.find("\"num_key_value_heads\": 32,"), 26);
  EXPECT_EQ(parse_model_config(no_kv).decoder.num_key_value_heads, 32);
  // transformers 4.56 and later write "dtype" instead of "torch_dtype".
  std::string newer = kLlama2_7b;
  newer.replace(newer.find("\"torch_dtype\""), 13, "\"dtype\"");
  EXPECT_EQ(parse_model_config(newer).dtype, DType::kF16);
}

TEST(ModelConfig, ReadsQwen25WithQkvBiasAndTiedEmbeddings) {
  const ModelConfig c = parse_model_config(kQwen25_05b);
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.decoder.head_dim, 64);
  EXPECT_EQ(c.decoder.num_key_value_heads, 2);
  EXPECT_TRUE(c.decoder.qkv_bias);
  EXPECT_FALSE(c.decoder.o_bias);
  EXPECT_TRUE(c.decoder.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.decoder.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.decoder.rms_norm_eps, 1e-6);
}

TEST(ModelConfig, ReadsFluxAndCogVideoX) {
  const ModelConfig f = parse_model_config(kFluxDev);
  EXPECT_EQ(f.architecture, Architecture::kFlux);
  EXPECT_FALSE(f.is_decoder());
  EXPECT_EQ(f.flux.num_layers, 19);
  EXPECT_EQ(f.flux.num_single_layers, 38);
  EXPECT_EQ(f.flux.inner_dim(), 3072);
  EXPECT_EQ(f.flux.out_channels, 64);  // absent: in_channels
  EXPECT_TRUE(f.flux.guidance_embeds);
  EXPECT_EQ(f.flux.axes_dims_rope, (std::vector<int64_t>{16, 56, 56}));

  const ModelConfig v = parse_model_config(kCogVideoX2b);
  EXPECT_EQ(v.architecture, Architecture::kCogVideoX);
  EXPECT_EQ(v.cogvideox.inner_dim(), 1920);
  EXPECT_EQ(v.cogvideox.num_layers, 30);
  EXPECT_EQ(v.cogvideox.time_embed_dim, 512);
  EXPECT_EQ(v.cogvideox.patch_size_t, 0);
  EXPECT_FALSE(v.cogvideox.use_rotary_positional_embeddings);
  EXPECT_DOUBLE_EQ(v.cogvideox.norm_eps, 1e-5);
}

TEST(ModelConfig, RefusesUnknownArchitecturesByName) {
  EXPECT_NE(refusal(R"({"model_type": "mistral", "hidden_size": 8})", ErrorCode::kUnsupported)
                .find("model_type = \"mistral\": expected llama or qwen2"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"_class_name": "SD3Transformer2DModel"})", ErrorCode::kUnsupported)
                .find("_class_name = \"SD3Transformer2DModel\": expected FluxTransformer2DModel"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"hidden_size": 8})").find("model_type is missing"), std::string::npos);
}

TEST(ModelConfig, RefusesBadFieldsNamingThem) {
  struct Case {
    std::string field, value, message;
  };
  const Case cases[] = {
      {"hidden_size", "", "cfg.json: hidden_size is missing: expected an integer from 1 to"},
      {"hidden_size", "\"4096\"", "hidden_size = \"4096\" (a string): expected an integer"},
      {"hidden_size", "4096.5", "hidden_size = 4096.5 (a number): expected an integer"},
      {"hidden_size", "0", "hidden_size = 0 (an integer): expected an integer from 1 to 1048576"},
      {"hidden_size", "-4096", "hidden_size = -4096"},
      {"hidden_size", "18446744073709551615", "hidden_size = 18446744073709551615"},
      {"vocab_size", "4294967296",
       "vocab_size = 4294967296 (an integer): expected an integer from "
       "1 to 2147483647"},
      {"num_key_value_heads", "3",
       "num_key_value_heads = 3 (an integer): expected a divisor of "
       "num_attention_heads = 32"},
      {"num_key_value_heads", "64",
       "num_key_value_heads = 64 (an integer): expected an integer "
       "from 1 to 32"},
      {"num_attention_heads", "24",
       "hidden_size = 4096 (an integer): expected a multiple of "
       "num_attention_heads = 24"},
      {"num_attention_heads", "3",
       "num_key_value_heads = 8 (an integer): expected an integer "
       "from 1 to 3"},
      {"rms_norm_eps", "0", "rms_norm_eps = 0 (an integer): expected a finite number > 0"},
      {"rms_norm_eps", "-1e-5", "rms_norm_eps = -1e-05"},
      {"rope_theta", "1e400",
       "cfg.json: not valid JSON: [json.exception.out_of_range.406] number "
       "overflow parsing '1e400'"},
      {"rope_theta", "true", "rope_theta = true (a boolean): expected a finite number > 0"},
      {"hidden_act", "\"gelu\"", "hidden_act = \"gelu\" (a string): expected \"silu\""},
      {"attention_bias", "1", "attention_bias = 1 (an integer): expected true or false"},
      {"torch_dtype", "\"float64\"",
       "torch_dtype = \"float64\" (a string): expected bfloat16, "
       "float16 or float32"},
      {"rope_scaling", "[8]", "rope_scaling = [8] (a list): expected a JSON object"},
  };
  for (const Case& c : cases) {
    const std::string message = refusal(llama3_with(c.field, c.value));
    EXPECT_NE(message.find(c.message), std::string::npos)
        << c.field << " = " << c.value << ": " << message;
  }
}

TEST(ModelConfig, RefusesBadRopeScalingNamingTheNestedField) {
  const std::string base = R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"})";
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return llama3_with("rope_scaling", s);
  };
  EXPECT_NE(refusal(with("\"factor\": 8.0,", "")).find("rope_scaling.factor is missing"),
            std::string::npos);
  EXPECT_NE(refusal(with("\"factor\": 8.0", "\"factor\": 0.5"))
                .find("rope_scaling.factor = 0.5 (a number): expected a finite number >= 1"),
            std::string::npos);
  EXPECT_NE(refusal(with("\"high_freq_factor\": 4.0", "\"high_freq_factor\": 1.0"))
                .find("rope_scaling.high_freq_factor = 1.0 (a number): expected a value > "
                      "low_freq_factor = 1"),
            std::string::npos);
  EXPECT_NE(refusal(with("8192", "-1")).find("rope_scaling.original_max_position_embeddings = -1"),
            std::string::npos);
  EXPECT_NE(refusal(with("\"llama3\"", "\"yarn\""), ErrorCode::kUnsupported)
                .find("rope_scaling.rope_type = \"yarn\": expected \"llama3\" or \"default\""),
            std::string::npos);
  // transformers before 4.43 wrote "type".
  const ModelConfig old = parse_model_config(with("rope_type", "type"));
  EXPECT_TRUE(old.decoder.rope_scaling.llama3);
}

TEST(ModelConfig, RefusesBadDiTFields) {
  auto flux_with = [](const std::string& from, const std::string& to) {
    std::string s = kFluxDev;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(refusal(flux_with("[16, 56, 56]", "[16, 56, 58]"))
                .find("axes_dims_rope = [16,56,58] (a list): expected dimensions summing to "
                      "attention_head_dim = 128 (they sum to 130)"),
            std::string::npos);
  EXPECT_NE(refusal(flux_with("[16, 56, 56]", "[15, 57, 56]")).find("expected even dimensions"),
            std::string::npos);
  std::string wide = flux_with("\"attention_head_dim\": 128", "\"attention_head_dim\": 1024");
  wide.replace(wide.find("\"num_attention_heads\": 24"), 25, "\"num_attention_heads\": 2048");
  EXPECT_NE(refusal(wide).find("num_attention_heads = 2048 (an integer): expected "
                               "num_attention_heads * attention_head_dim <= 1048576"),
            std::string::npos);
  EXPECT_NE(refusal(flux_with("\"in_channels\": 64,", "")).find("in_channels is missing"),
            std::string::npos);
  std::string cog = kCogVideoX2b;
  cog.replace(cog.find("\"gelu-approximate\""), 18, "\"relu\"");
  EXPECT_NE(refusal(cog, ErrorCode::kUnsupported)
                .find("activation_fn = \"relu\": expected \"gelu-approximate\""),
            std::string::npos);
}

TEST(ModelConfig, RefusesMalformedJson) {
  EXPECT_NE(refusal("").find("cfg.json: not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("{\"model_type\": \"llama\",}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("[1, 2]").find("the file = [1,2] (a list): expected a JSON object"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"model_type": "llama", "model_type": "qwen2"})")
                .find("key \"model_type\" appears twice in one object"),
            std::string::npos);
  EXPECT_NE(
      refusal(std::string(100, '[') + std::string(100, ']')).find("nested deeper than 32 levels"),
      std::string::npos);
  EXPECT_NE(refusal("{\"model_type\": \"ll\xff\"}").find("not valid JSON"), std::string::npos);
}

TEST(ModelConfig, ReadsAFileOrADirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera_model_config_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << kQwen25_05b;
  EXPECT_EQ(read_model_config(dir.string()).architecture, Architecture::kQwen2);
  EXPECT_EQ(read_model_config((dir / "config.json").string()).decoder.hidden_size, 896);
  try {
    read_model_config((dir / "missing.json").string());
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kSystem);
    EXPECT_NE(std::string(e.what()).find("missing.json: cannot open"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::model
