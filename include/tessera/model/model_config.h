// A model's configuration as read from its Hugging Face config.json: the decoder LLMs
// (transformers' LlamaConfig for Llama 2 and 3, Qwen2Config for Qwen2.5) and the diffusion
// transformers (diffusers' FluxTransformer2DModel and CogVideoXTransformer3DModel configs).
//
// The architecture is taken from "_class_name" (diffusers) or "model_type" (transformers);
// any other architecture is refused by name (kUnsupported). Every field the runtime uses is
// read strictly: a missing required field, a value of the wrong JSON type or one outside its
// range throws kInvalidArgument naming the source, the field (nested ones as
// "rope_scaling.factor"), the value and what was expected. Optional fields take the defaults
// the Hugging Face classes give them. Fields the runtime does not use are ignored.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::model {

enum class Architecture : uint8_t {
  kLlama,      // model_type "llama": Llama 2 and 3
  kQwen2,      // model_type "qwen2": Qwen2 and Qwen2.5 (bias on the q, k, v projections)
  kFlux,       // _class_name "FluxTransformer2DModel": Flux.1 double- and single-stream blocks
  kCogVideoX,  // _class_name "CogVideoXTransformer3DModel"
};
const char* architecture_name(Architecture architecture);

// RoPE frequency scaling: none, or Llama 3's "llama3" (rope_scaling.rope_type).
struct RopeScaling {
  bool llama3 = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Llama 2/3 and Qwen2.5 decoders (transformers' field names).
struct DecoderConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the SiLU-gated MLP's width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // default: num_attention_heads (MHA)
  int64_t head_dim = 0;             // default: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool qkv_bias = false;  // Qwen2: always; Llama: attention_bias
  bool o_bias = false;    // Llama: attention_bias
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
};

// Flux.1's transformer (diffusers' FluxTransformer2DModel).
struct FluxConfig {
  int64_t patch_size = 1;
  int64_t in_channels = 0;
  int64_t out_channels = 0;  // default: in_channels
  int64_t num_layers = 0;    // double-stream blocks
  int64_t num_single_layers = 0;
  int64_t attention_head_dim = 0;
  int64_t num_attention_heads = 0;
  int64_t joint_attention_dim = 0;    // text encoder width (T5)
  int64_t pooled_projection_dim = 0;  // pooled text width (CLIP)
  bool guidance_embeds = false;
  std::vector<int64_t> axes_dims_rope = {16, 56, 56};  // sums to attention_head_dim

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
};

// CogVideoX's transformer (diffusers' CogVideoXTransformer3DModel).
struct CogVideoXConfig {
  int64_t num_attention_heads = 0;
  int64_t attention_head_dim = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;  // default: in_channels
  int64_t num_layers = 0;
  int64_t time_embed_dim = 0;
  int64_t text_embed_dim = 0;
  int64_t patch_size = 2;
  int64_t patch_size_t = 0;    // 0: no temporal patching (null in the file)
  int64_t sample_width = 90;   // latent width
  int64_t sample_height = 60;  // latent height
  int64_t sample_frames = 49;
  int64_t temporal_compression_ratio = 4;
  int64_t max_text_seq_length = 226;
  double norm_eps = 1e-5;
  bool norm_elementwise_affine = true;
  bool attention_bias = true;
  bool use_rotary_positional_embeddings = false;
  bool use_learned_positional_embeddings = false;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  DType dtype = DType::kBF16;  // dtype (or torch_dtype) when given, else bf16
  DecoderConfig decoder;       // kLlama, kQwen2
  FluxConfig flux;             // kFlux
  CogVideoXConfig cogvideox;   // kCogVideoX

  bool is_decoder() const {
    return architecture == Architecture::kLlama || architecture == Architecture::kQwen2;
  }
};

// Parses config.json text; `source` names it in errors (a path, or "config.json").
ModelConfig parse_model_config(std::string_view json_text, std::string_view source = "config.json");
// Reads `path`: a config.json file, or a directory holding one. kSystem if it cannot be read.
ModelConfig read_model_config(const std::string& path);

}  // namespace tessera::model
