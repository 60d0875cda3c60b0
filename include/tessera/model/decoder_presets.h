// Decoder configurations by name, shared by `tessera run llm` and the Python package:
//   tiny        2 layers, hidden 64, vocab 97 (tests and demos)
//   llama3-8b   meta-llama/Meta-Llama-3-8B's config.json
//   llama3-70b  meta-llama/Meta-Llama-3-70B's config.json
#pragma once

#include <string>
#include <vector>

#include "tessera/model/model_config.h"

namespace tessera::model {

std::vector<std::string> decoder_preset_names();

// A preset's configuration; an unknown name throws kInvalidArgument naming `what` and listing
// the presets.
DecoderConfig decoder_preset(const std::string& name, const std::string& what = "preset");

// `text` names a preset or a Hugging Face config.json (a file or the directory holding it) of a
// Llama or Qwen2 decoder; errors name `what` (e.g. "--config").
DecoderConfig load_decoder_config(const std::string& text, const std::string& what);

}  // namespace tessera::model
