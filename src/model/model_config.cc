// config.json -> ModelConfig (model_config.h). Bounds are generous (every released model fits
// with room) but finite, so products of fields cannot overflow int64 downstream.
#include "tessera/model/model_config.h"

#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "model/json_fields.h"
#include "tessera/core/error.h"

namespace tessera::model {

namespace {

using detail::Json;
using detail::JsonFields;

constexpr int64_t kMaxWidth = int64_t{1} << 20;  // hidden, intermediate, channels
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxVocab = (int64_t{1} << 31) - 1;  // token ids fit int32
constexpr int64_t kMaxPositions = int64_t{1} << 30;

DType read_dtype(const JsonFields& f) {
  // transformers 4.56 and later write "dtype"; earlier versions and diffusers "torch_dtype".
  const char* key = f.has("dtype") ? "dtype" : "torch_dtype";
  const std::string name = f.text(key, std::string("bfloat16"));
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  if (name == "float32") return DType::kF32;
  f.fail(key, f.find(key), "bfloat16, float16 or float32");
}

// The scaling fields of a rope_scaling (transformers < 5) or rope_parameters (>= 5) object `f`.
// rope_scaling must name its type; rope_parameters without one is the default RoPE.
RopeScaling read_scaling_fields(const JsonFields& f, const std::string& object) {
  RopeScaling s;
  // transformers writes "rope_type"; configs older than 4.43 write "type".
  const char* key = f.has("rope_type") ? "rope_type" : "type";
  const std::string type = object == "rope_parameters" ? f.text(key, std::string("default"))
                                                       : f.text(key);
  if (type == "default") return s;
  if (type != "llama3")
    throw_error(
        ErrorCode::kUnsupported,
        str(f.source(), ": ", object, ".", key, " = \"", type,
            "\": expected \"llama3\" or \"default\" (the RoPE scalings Tessera implements)"));
  s.llama3 = true;
  s.factor = f.number("factor", 1.0, 1e6, std::nullopt);
  s.low_freq_factor = f.number("low_freq_factor", 0.0, 1e6, std::nullopt, /*lo_open=*/true);
  s.high_freq_factor = f.number("high_freq_factor", 0.0, 1e6, std::nullopt, true);
  if (s.high_freq_factor <= s.low_freq_factor)
    f.fail("high_freq_factor", f.find("high_freq_factor"),
           str("a value > low_freq_factor = ", s.low_freq_factor));
  s.original_max_position_embeddings =
      f.integer("original_max_position_embeddings", 1, kMaxPositions);
  return s;
}

// RoPE's theta and scaling: transformers >= 5 writes both into "rope_parameters"; earlier
// versions write "rope_theta" and "rope_scaling" at the top (a top-level rope_theta is the
// fallback for a rope_parameters without one).
void read_rope(const JsonFields& top, double& theta, RopeScaling& scaling) {
  theta = top.number("rope_theta", 0.0, 1e12, 10000.0, true);
  if (top.has("rope_parameters")) {
    const JsonFields f(*top.find("rope_parameters"), top.source(), "rope_parameters.");
    theta = f.number("rope_theta", 0.0, 1e12, theta, true);
    scaling = read_scaling_fields(f, "rope_parameters");
  } else if (top.has("rope_scaling")) {
    scaling = read_scaling_fields(JsonFields(*top.find("rope_scaling"), top.source(),
                                             "rope_scaling."),
                                  "rope_scaling");
  }
}

DecoderConfig read_decoder(const JsonFields& f, Architecture arch) {
  DecoderConfig c;
  c.vocab_size = f.integer("vocab_size", 1, kMaxVocab);
  c.hidden_size = f.integer("hidden_size", 1, kMaxWidth);
  c.intermediate_size = f.integer("intermediate_size", 1, kMaxWidth);
  c.num_hidden_layers = f.integer("num_hidden_layers", 1, kMaxLayers);
  c.num_attention_heads = f.integer("num_attention_heads", 1, kMaxHeads);
  c.num_key_value_heads =
      f.integer("num_key_value_heads", 1, c.num_attention_heads, c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail("num_key_value_heads", f.find("num_key_value_heads"),
           str("a divisor of num_attention_heads = ", c.num_attention_heads));
  if (f.has("head_dim")) {
    c.head_dim = f.integer("head_dim", 2, kMaxHeadDim);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      f.fail("hidden_size", f.find("hidden_size"),
             str("a multiple of num_attention_heads = ", c.num_attention_heads,
                 " (head_dim is not given)"));
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (c.head_dim > kMaxHeadDim)
      f.fail("hidden_size", f.find("hidden_size"),
             str("at most ", kMaxHeadDim, " per head (head_dim is not given)"));
  }
  if (c.head_dim % 2 != 0)
    f.fail(f.has("head_dim") ? "head_dim" : "hidden_size",
           f.find(f.has("head_dim") ? "head_dim" : "hidden_size"),
           str("an even head dimension for RoPE (got ", c.head_dim, ")"));
  const int64_t default_positions = arch == Architecture::kQwen2 ? 32768 : 2048;
  c.max_position_embeddings =
      f.integer("max_position_embeddings", 1, kMaxPositions, default_positions);
  c.rms_norm_eps = f.number("rms_norm_eps", 0.0, 1.0, 1e-6, /*lo_open=*/true);
  read_rope(f, c.rope_theta, c.rope_scaling);
  const std::string act = f.text("hidden_act", std::string("silu"));
  if (act != "silu") f.fail("hidden_act", f.find("hidden_act"), "\"silu\"");
  if (arch == Architecture::kQwen2) {
    c.qkv_bias = true;  // Qwen2's q, k, v projections always carry a bias, o_proj none
    if (f.boolean("use_sliding_window", false))
      throw_error(ErrorCode::kUnsupported,
                  str(f.source(), ": use_sliding_window = true: sliding-window attention is not ",
                      "implemented; expected false"));
  } else {
    c.qkv_bias = c.o_bias = f.boolean("attention_bias", false);
    c.mlp_bias = f.boolean("mlp_bias", false);
  }
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  return c;
}

FluxConfig read_flux(const JsonFields& f) {
  FluxConfig c;
  c.patch_size = f.integer("patch_size", 1, 64, 1);
  c.in_channels = f.integer("in_channels", 1, kMaxWidth);
  c.out_channels = f.integer("out_channels", 1, kMaxWidth, c.in_channels);
  c.num_layers = f.integer("num_layers", 0, kMaxLayers);
  c.num_single_layers = f.integer("num_single_layers", 0, kMaxLayers);
  if (c.num_layers + c.num_single_layers == 0)
    f.fail("num_layers", f.find("num_layers"), "at least one block (num_single_layers is 0 too)");
  c.attention_head_dim = f.integer("attention_head_dim", 2, kMaxHeadDim);
  c.num_attention_heads = f.integer("num_attention_heads", 1, kMaxHeads);
  if (c.inner_dim() > kMaxWidth)
    f.fail("num_attention_heads", f.find("num_attention_heads"),
           str("num_attention_heads * attention_head_dim <= ", kMaxWidth));
  c.joint_attention_dim = f.integer("joint_attention_dim", 1, kMaxWidth);
  c.pooled_projection_dim = f.integer("pooled_projection_dim", 1, kMaxWidth);
  c.guidance_embeds = f.boolean("guidance_embeds", false);
  c.axes_dims_rope = f.integers("axes_dims_rope", 2, kMaxHeadDim, 1, 8, c.axes_dims_rope);
  int64_t total = 0;
  for (int64_t d : c.axes_dims_rope) {
    if (d % 2 != 0) f.fail("axes_dims_rope", f.find("axes_dims_rope"), "even dimensions");
    total += d;
  }
  if (total != c.attention_head_dim)
    f.fail("axes_dims_rope", f.find("axes_dims_rope"),
           str("dimensions summing to attention_head_dim = ", c.attention_head_dim,
               " (they sum to ", total, ")"));
  return c;
}

CogVideoXConfig read_cogvideox(const JsonFields& f) {
  CogVideoXConfig c;
  c.num_attention_heads = f.integer("num_attention_heads", 1, kMaxHeads);
  c.attention_head_dim = f.integer("attention_head_dim", 2, kMaxHeadDim);
  if (c.attention_head_dim % 2 != 0)
    f.fail("attention_head_dim", f.find("attention_head_dim"), "an even head dimension for RoPE");
  if (c.inner_dim() > kMaxWidth)
    f.fail("num_attention_heads", f.find("num_attention_heads"),
           str("num_attention_heads * attention_head_dim <= ", kMaxWidth));
  c.in_channels = f.integer("in_channels", 1, kMaxWidth);
  c.out_channels = f.integer("out_channels", 1, kMaxWidth, c.in_channels);
  c.num_layers = f.integer("num_layers", 1, kMaxLayers);
  c.time_embed_dim = f.integer("time_embed_dim", 1, kMaxWidth);
  c.text_embed_dim = f.integer("text_embed_dim", 1, kMaxWidth);
  c.patch_size = f.integer("patch_size", 1, 64, 2);
  c.patch_size_t = f.integer("patch_size_t", 1, 64, 0);
  c.sample_width = f.integer("sample_width", 1, 1 << 16, 90);
  c.sample_height = f.integer("sample_height", 1, 1 << 16, 60);
  c.sample_frames = f.integer("sample_frames", 1, 1 << 16, 49);
  c.temporal_compression_ratio = f.integer("temporal_compression_ratio", 1, 64, 4);
  c.max_text_seq_length = f.integer("max_text_seq_length", 1, 1 << 20, 226);
  c.norm_eps = f.number("norm_eps", 0.0, 1.0, 1e-5, /*lo_open=*/true);
  c.norm_elementwise_affine = f.boolean("norm_elementwise_affine", true);
  c.attention_bias = f.boolean("attention_bias", true);
  c.use_rotary_positional_embeddings = f.boolean("use_rotary_positional_embeddings", false);
  c.use_learned_positional_embeddings = f.boolean("use_learned_positional_embeddings", false);
  const std::string act = f.text("activation_fn", std::string("gelu-approximate"));
  if (act != "gelu-approximate")
    throw_error(ErrorCode::kUnsupported,
                str(f.source(), ": activation_fn = \"", act,
                    "\": expected \"gelu-approximate\" (the feed-forward activation implemented)"));
  return c;
}

}  // namespace

const char* architecture_name(Architecture architecture) {
  switch (architecture) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kFlux:
      return "flux";
    case Architecture::kCogVideoX:
      return "cogvideox";
  }
  return "?";
}

ModelConfig parse_model_config(std::string_view json_text, std::string_view source) {
  const Json root = detail::parse_json(json_text, source);
  const JsonFields f(root, std::string(source));
  ModelConfig config;
  if (f.has("_class_name")) {  // diffusers
    const std::string name = f.text("_class_name");
    if (name == "FluxTransformer2DModel") {
      config.architecture = Architecture::kFlux;
      config.flux = read_flux(f);
    } else if (name == "CogVideoXTransformer3DModel") {
      config.architecture = Architecture::kCogVideoX;
      config.cogvideox = read_cogvideox(f);
    } else {
      throw_error(ErrorCode::kUnsupported,
                  str(source, ": _class_name = \"", name.substr(0, 80),
                      "\": expected FluxTransformer2DModel or CogVideoXTransformer3DModel (the ",
                      "diffusion transformers Tessera implements)"));
    }
  } else {  // transformers
    if (!f.has("model_type"))
      f.fail("model_type", f.find("model_type"),
             "\"llama\" or \"qwen2\" (or a diffusers _class_name)");
    const std::string type = f.text("model_type");
    if (type == "llama") {
      config.architecture = Architecture::kLlama;
    } else if (type == "qwen2") {
      config.architecture = Architecture::kQwen2;
    } else {
      throw_error(
          ErrorCode::kUnsupported,
          str(source, ": model_type = \"", type.substr(0, 80),
              "\": expected llama or qwen2 (the decoder architectures Tessera implements)"));
    }
    config.decoder = read_decoder(f, config.architecture);
  }
  config.dtype = read_dtype(f);
  return config;
}

ModelConfig read_model_config(const std::string& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "config.json";
  std::ifstream in(file, std::ios::binary);
  TESSERA_CHECK(bool(in), ErrorCode::kSystem, file.string(), ": cannot open the model config");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), file.string());
}

}  // namespace tessera::model
