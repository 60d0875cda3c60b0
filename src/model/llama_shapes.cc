#include "tessera/model/llama_shapes.h"

#include "tessera/core/error.h"

namespace tessera::model {

LlamaShapes llama_shapes(const DecoderConfig& config, int rank, int ranks) {
  TESSERA_CHECK_ARG(ranks >= 1, "llama_shapes: ranks = ", ranks, ": expected >= 1");
  TESSERA_CHECK_ARG(rank >= 0 && rank < ranks, "llama_shapes: rank = ", rank, ": expected in [0, ",
                    ranks, ")");
  const auto positive = [](int64_t value, const char* field) {
    TESSERA_CHECK_ARG(value >= 1, "DecoderConfig.", field, " = ", value, ": expected >= 1");
  };
  positive(config.vocab_size, "vocab_size");
  positive(config.hidden_size, "hidden_size");
  positive(config.intermediate_size, "intermediate_size");
  positive(config.num_hidden_layers, "num_hidden_layers");
  positive(config.num_attention_heads, "num_attention_heads");
  positive(config.num_key_value_heads, "num_key_value_heads");
  positive(config.head_dim, "head_dim");
  TESSERA_CHECK_ARG(config.head_dim % 2 == 0, "DecoderConfig.head_dim = ", config.head_dim,
                    ": expected even (RoPE rotates pairs of dims)");
  TESSERA_CHECK_ARG(config.rms_norm_eps > 0, "DecoderConfig.rms_norm_eps = ", config.rms_norm_eps,
                    ": expected > 0");
  TESSERA_CHECK_ARG(config.num_attention_heads % config.num_key_value_heads == 0,
                    "DecoderConfig.num_key_value_heads = ", config.num_key_value_heads,
                    ": expected to divide num_attention_heads = ", config.num_attention_heads);
  const auto divisible = [ranks](int64_t value, const char* field) {
    TESSERA_CHECK_ARG(value % ranks == 0, "DecoderConfig.", field, " = ", value,
                      ": expected a multiple of the ", ranks, " tensor-parallel ranks");
  };
  divisible(config.num_attention_heads, "num_attention_heads");
  // Fewer KV heads than ranks (GQA at high P): each KV head is replicated on P / Hkv ranks,
  // as vLLM and Megatron do, so P must be a multiple of Hkv then.
  const int64_t kv = config.num_key_value_heads;
  TESSERA_CHECK_ARG(kv % ranks == 0 || ranks % kv == 0, "DecoderConfig.num_key_value_heads = ", kv,
                    ": expected a multiple of the ", ranks,
                    " tensor-parallel ranks or a divisor of them (then replicated)");
  divisible(config.intermediate_size, "intermediate_size");
  TESSERA_CHECK(!config.o_bias, ErrorCode::kUnsupported,
                "DecoderConfig.o_bias (attention_bias on o_proj): not supported by the Llama "
                "layer yet");
  TESSERA_CHECK(!config.mlp_bias, ErrorCode::kUnsupported,
                "DecoderConfig.mlp_bias: not supported by the Llama layer yet");

  LlamaShapes s;
  s.rank = rank;
  s.ranks = ranks;
  s.hidden = config.hidden_size;
  s.head_dim = config.head_dim;
  s.q_heads = config.num_attention_heads / ranks;
  s.kv_heads = kv % ranks == 0 ? kv / ranks : 1;
  s.kv_head_begin = kv % ranks == 0 ? rank * s.kv_heads : rank * kv / ranks;
  s.intermediate = config.intermediate_size / ranks;
  s.vocab = config.vocab_size;
  s.num_layers = config.num_hidden_layers;
  return s;
}

}  // namespace tessera::model
