// Fuzzes the model runtime's JSON readers: config.json (parse_model_config) and
// model.safetensors.index.json (parse_safetensors_index); the input is the file text, given to
// both. Each either refuses with tessera::Error or returns values inside the ranges it
// promises (heads divisible by KV heads, even head dims, Flux's RoPE axes summing to the head
// dim, shard files that are plain names). A crash, UB, a hang (deep nesting), another exception
// or a value outside its range is a finding.
#include <exception>
#include <numeric>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/model/model_config.h"
#include "tessera/model/weight_store.h"

using namespace tessera;
using namespace tessera::model;

namespace {

void check_decoder(const DecoderConfig& c) {
  if (c.vocab_size < 1 || c.hidden_size < 1 || c.intermediate_size < 1 || c.num_hidden_layers < 1)
    fuzz::fail("a decoder size below 1 was accepted");
  if (c.num_attention_heads < 1 || c.num_key_value_heads < 1 ||
      c.num_attention_heads % c.num_key_value_heads != 0)
    fuzz::fail("KV heads that do not divide the heads were accepted");
  if (c.head_dim < 2 || c.head_dim % 2 != 0) fuzz::fail("an odd or empty head_dim was accepted");
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) fuzz::fail("eps or theta <= 0 was accepted");
  const RopeScaling& s = c.rope_scaling;
  if (s.llama3 &&
      (!(s.factor >= 1) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor) ||
       s.original_max_position_embeddings < 1))
    fuzz::fail("llama3 rope_scaling outside its ranges was accepted");
}

void check_config(const ModelConfig& c) {
  switch (c.architecture) {
    case Architecture::kLlama:
    case Architecture::kQwen2:
      check_decoder(c.decoder);
      break;
    case Architecture::kFlux: {
      const FluxConfig& f = c.flux;
      const int64_t axes =
          std::accumulate(f.axes_dims_rope.begin(), f.axes_dims_rope.end(), int64_t{0});
      if (axes != f.attention_head_dim || f.num_attention_heads < 1 ||
          f.num_layers + f.num_single_layers < 1 || f.in_channels < 1 || f.out_channels < 1)
        fuzz::fail("a Flux config outside its ranges was accepted");
      break;
    }
    case Architecture::kCogVideoX: {
      const CogVideoXConfig& v = c.cogvideox;
      if (v.num_attention_heads < 1 || v.attention_head_dim < 2 || v.attention_head_dim % 2 != 0 ||
          v.num_layers < 1 || v.in_channels < 1 || !(v.norm_eps > 0))
        fuzz::fail("a CogVideoX config outside its ranges was accepted");
      break;
    }
  }
  if (c.dtype != DType::kBF16 && c.dtype != DType::kF16 && c.dtype != DType::kF32)
    fuzz::fail("a config dtype other than bf16, f16, f32 was accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_config(parse_model_config(text, "fuzz/config.json"));
  } catch (const Error&) {
  } catch (const std::exception& e) {
    fuzz::fail(std::string("parse_model_config threw a non-tessera exception: ") + e.what());
  }
  try {
    for (const auto& [name, file] : parse_safetensors_index(text, "fuzz/index.json"))
      if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos)
        fuzz::fail("the index accepted a shard file outside its directory: " + file);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    fuzz::fail(std::string("parse_safetensors_index threw a non-tessera exception: ") + e.what());
  }
  return 0;
}
