// The per-rank sizes of a Llama-family decoder split over P tensor-parallel ranks (Megatron's
// split: attention heads and MLP columns per rank), checked against the configuration.
#pragma once

#include <cstdint>

#include "tessera/model/model_config.h"

namespace tessera::model {

struct LlamaShapes {
  int rank = 0;
  int ranks = 1;              // P
  int64_t hidden = 0;         // C (replicated)
  int64_t head_dim = 0;       // D
  int64_t q_heads = 0;        // num_attention_heads / P
  int64_t kv_heads = 0;       // num_key_value_heads / P, or 1 (replicated) when P > Hkv
  int64_t kv_head_begin = 0;  // the first KV head this rank holds
  int64_t intermediate = 0;   // intermediate_size / P
  int64_t vocab = 0;          // V (embedding and lm_head are replicated)
  int64_t num_layers = 0;

  int64_t q_width() const { return q_heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
};

// With P > num_key_value_heads (P a multiple of it) each KV head is replicated on P / Hkv
// ranks: rank r holds KV head r Hkv / P, the one its query heads [r Hq/P, (r+1) Hq/P) use.
//
// Throws kInvalidArgument naming the field ("num_attention_heads", "num_key_value_heads",
// "intermediate_size", ...) when a size is < 1, when P does not divide it (num_key_value_heads:
// neither divides the other), or when num_key_value_heads does not divide num_attention_heads;
// naming "ranks"/"rank" when those are out of range; kUnsupported for o_bias and mlp_bias (not
// implemented yet).
LlamaShapes llama_shapes(const DecoderConfig& config, int rank, int ranks);

}  // namespace tessera::model
