// One tensor-parallel rank's weights of a Llama-family decoder (Llama 2/3, Qwen2.5), in float32
// host memory, laid out as Hugging Face stores them (a linear's weight is [out, in]) and cut to
// the rank's shard: q/k/v/gate/up keep rows [r out/P, (r+1) out/P) (column-parallel), o/down
// keep columns [r in/P, (r+1) in/P) (row-parallel, copied contiguous); norms, the embedding
// and lm_head are replicated, and so are k/v heads when P > num_key_value_heads (llama_shapes).
//
// Two sources, one loader: random weights from a seed (each tensor drawn whole from a stream
// seeded by the seed and the tensor's Hugging Face name, then cut, so every P sees the same
// model), or a WeightStore (any float dtype, widened to float32).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/model/llama_shapes.h"
#include "tessera/model/weight_store.h"

namespace tessera::model {

struct LlamaLayerWeights {
  std::vector<float> input_norm;              // [C]
  std::vector<float> q, k, v;                 // [Hq/P * D, C], [kv_heads * D, C] x2
  std::vector<float> q_bias, k_bias, v_bias;  // qkv_bias only (Qwen2): [Hq/P * D], [Hkv/P * D]
  std::vector<float> o;                       // [C, Hq/P * D]
  std::vector<float> post_norm;               // [C]
  std::vector<float> gate, up;                // [F/P, C]
  std::vector<float> down;                    // [C, F/P]
};

struct LlamaWeights {
  LlamaShapes shapes;
  std::vector<float> embed;  // [V, C]
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> final_norm;  // [C]
  std::vector<float> lm_head;     // [V, C]; a copy of embed when tie_word_embeddings
};

// Where a loader takes a rank's weights from, one tensor at a time, so a model can upload layer
// by layer without holding the float32 model: the tensor's Hugging Face name, its full shape
// [rows, cols] ([n, 1] or [1, n] for vectors) and the part this rank keeps, as float32.
using LlamaTensorSource = std::function<std::vector<float>(
    const std::string& name, int64_t rows, int64_t cols, const TensorShard& shard)>;
// Random weights from `seed` (random_llama_weights' values); a WeightStore's tensors (any float
// dtype widened; the store must outlive the source).
LlamaTensorSource random_llama_source(uint64_t seed);
LlamaTensorSource store_llama_source(const WeightStore& store);

// One decoder layer's weights of this rank.
LlamaLayerWeights load_llama_layer(const DecoderConfig& config, const LlamaTensorSource& source,
                                   int rank, int ranks, int64_t layer);
// Every weight of this rank; with_layers false leaves `layers` empty (embedding, final norm and
// lm_head only, for loaders that take the layers one by one).
LlamaWeights load_llama_weights(const DecoderConfig& config, const LlamaTensorSource& source,
                                int rank, int ranks, bool with_layers = true);

// Random weights: linears uniform in [-1/sqrt(in), 1/sqrt(in)), the embedding in [-1, 1),
// norm weights 1 + [-0.1, 0.1), biases [-0.1, 0.1). Deterministic on every platform.
LlamaWeights random_llama_weights(const DecoderConfig& config, uint64_t seed, int rank, int ranks);

// The weights named model.embed_tokens.weight, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight
// (and q/k/v biases), model.layers.{i}.{input,post_attention}_layernorm.weight,
// model.layers.{i}.mlp.{gate,up,down}_proj.weight, model.norm.weight, lm_head.weight (unless
// tied). Shapes are checked by the store (errors name the tensor).
LlamaWeights load_llama_weights(const DecoderConfig& config, const WeightStore& store, int rank,
                                int ranks);

}  // namespace tessera::model
