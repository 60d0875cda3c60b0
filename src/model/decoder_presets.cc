// Decoder presets (see the header).
#include "tessera/model/decoder_presets.h"

#include <filesystem>
#include <system_error>

#include "tessera/core/error.h"

namespace tessera::model {

std::vector<std::string> decoder_preset_names() {
  return {"tiny", "llama3-8b", "llama3-70b"};
}

DecoderConfig decoder_preset(const std::string& name, const std::string& what) {
  DecoderConfig c;
  if (name == "tiny") {
    c.vocab_size = 97;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    return c;
  }
  TESSERA_CHECK_ARG(name == "llama3-8b" || name == "llama3-70b", what, " = '", name,
                    "': expected one of the presets tiny, llama3-8b, llama3-70b");
  const bool big = name == "llama3-70b";
  c.vocab_size = 128256;
  c.hidden_size = big ? 8192 : 4096;
  c.intermediate_size = big ? 28672 : 14336;
  c.num_hidden_layers = big ? 80 : 32;
  c.num_attention_heads = big ? 64 : 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  return c;
}

DecoderConfig load_decoder_config(const std::string& text, const std::string& what) {
  for (const std::string& name : decoder_preset_names())
    if (text == name) return decoder_preset(text, what);
  std::error_code ec;
  TESSERA_CHECK_ARG(std::filesystem::exists(text, ec), what, " = '", text,
                    "': no such file or directory; expected a preset (tiny, llama3-8b, "
                    "llama3-70b) or a config.json (the file or its directory)");
  const ModelConfig config = read_model_config(text);
  TESSERA_CHECK_ARG(config.is_decoder(), what, " = '", text, "': a ",
                    architecture_name(config.architecture),
                    " model: expected a Llama or Qwen2 decoder");
  return config.decoder;
}

}  // namespace tessera::model
