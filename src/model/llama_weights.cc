#include "tessera/model/llama_weights.h"

#include <cmath>
#include <functional>
#include <string>

#include "model/random_weights.h"
#include "tessera/core/error.h"

namespace tessera::model {
namespace {

// The part of a full [rows, cols] tensor that `shard` gives its rank, contiguous.
std::vector<float> cut(const std::vector<float>& full, int64_t rows, int64_t cols,
                       const TensorShard& shard) {
  if (shard.ranks == 1) return full;
  const bool by_rows = shard.dim == 0;
  const int64_t out_rows = by_rows ? rows / shard.ranks : rows;
  const int64_t out_cols = by_rows ? cols : cols / shard.ranks;
  const int64_t row0 = by_rows ? shard.rank * out_rows : 0;
  const int64_t col0 = by_rows ? 0 : shard.rank * out_cols;
  std::vector<float> part(size_t(out_rows * out_cols));
  for (int64_t i = 0; i < out_rows; ++i) {
    for (int64_t j = 0; j < out_cols; ++j)
      part[size_t(i * out_cols + j)] = full[size_t((row0 + i) * cols + col0 + j)];
  }
  return part;
}

}  // namespace

LlamaLayerWeights load_llama_layer(const DecoderConfig& config, const LlamaTensorSource& source,
                                   int rank, int ranks, int64_t layer) {
  const LlamaShapes s = llama_shapes(config, rank, ranks);
  TESSERA_CHECK_ARG(layer >= 0 && layer < s.num_layers, "load_llama_layer: layer = ", layer,
                    ": expected 0 to ", s.num_layers - 1);
  const int64_t c = s.hidden, q_out = config.num_attention_heads * s.head_dim;
  const int64_t kv_out = config.num_key_value_heads * s.head_dim, f = config.intermediate_size;
  const TensorShard whole = TensorShard::whole(), rows = TensorShard::rows(rank, ranks);
  const TensorShard columns = TensorShard::columns(rank, ranks);
  // k and v: this rank's KV heads, a row block of Hkv blocks when the heads are replicated.
  const int64_t kv_blocks = config.num_key_value_heads / s.kv_heads;
  const TensorShard kv_rows = TensorShard::rows(int(s.kv_head_begin / s.kv_heads), int(kv_blocks));
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  LlamaLayerWeights l;
  l.input_norm = source(p + "input_layernorm.weight", 1, c, whole);
  l.q = source(p + "self_attn.q_proj.weight", q_out, c, rows);
  l.k = source(p + "self_attn.k_proj.weight", kv_out, c, kv_rows);
  l.v = source(p + "self_attn.v_proj.weight", kv_out, c, kv_rows);
  if (config.qkv_bias) {
    l.q_bias = source(p + "self_attn.q_proj.bias", q_out, 1, rows);
    l.k_bias = source(p + "self_attn.k_proj.bias", kv_out, 1, kv_rows);
    l.v_bias = source(p + "self_attn.v_proj.bias", kv_out, 1, kv_rows);
  }
  l.o = source(p + "self_attn.o_proj.weight", c, q_out, columns);
  l.post_norm = source(p + "post_attention_layernorm.weight", 1, c, whole);
  l.gate = source(p + "mlp.gate_proj.weight", f, c, rows);
  l.up = source(p + "mlp.up_proj.weight", f, c, rows);
  l.down = source(p + "mlp.down_proj.weight", c, f, columns);
  return l;
}

LlamaWeights load_llama_weights(const DecoderConfig& config, const LlamaTensorSource& source,
                                int rank, int ranks, bool with_layers) {
  LlamaWeights w;
  w.shapes = llama_shapes(config, rank, ranks);
  const int64_t c = w.shapes.hidden, v = w.shapes.vocab;
  const TensorShard whole = TensorShard::whole();
  w.embed = source("model.embed_tokens.weight", v, c, whole);
  for (int64_t i = 0; with_layers && i < w.shapes.num_layers; ++i)
    w.layers.push_back(load_llama_layer(config, source, rank, ranks, i));
  w.final_norm = source("model.norm.weight", 1, c, whole);
  w.lm_head = config.tie_word_embeddings ? w.embed : source("lm_head.weight", v, c, whole);
  return w;
}

LlamaTensorSource random_llama_source(uint64_t seed) {
  return [seed](const std::string& name, int64_t rows, int64_t cols, const TensorShard& shard) {
    const bool norm = name.ends_with("norm.weight"), bias = name.ends_with(".bias");
    const bool embed = name == "model.embed_tokens.weight";
    const float scale = norm || bias ? 0.1f : embed ? 1.0f : 1.0f / std::sqrt(float(cols));
    return cut(random_tensor(seed, name, rows, cols, norm ? 1.0f : 0.0f, scale), rows, cols, shard);
  };
}

LlamaTensorSource store_llama_source(const WeightStore& store) {
  return [&store](const std::string& name, int64_t rows, int64_t cols, const TensorShard& shard) {
    const DType dtype = store.tensor(name).dtype();
    const bool vector = rows == 1 || cols == 1;
    const TensorView t = vector ? store.tensor(name, {rows * cols}, dtype, shard)
                                : store.tensor(name, {rows, cols}, dtype, shard);
    std::vector<float> out(size_t(t.numel()));
    const int64_t out_cols = t.ndim() == 2 ? t.size(1) : 1;
    const int64_t col_stride = t.ndim() == 2 ? t.stride(1) : 0;
    for (int64_t i = 0; i < t.size(0); ++i) {
      for (int64_t j = 0; j < out_cols; ++j)
        out[size_t(i * out_cols + j)] =
            load_as_float(t.data(), dtype, i * t.stride(0) + j * col_stride);
    }
    return out;
  };
}

LlamaWeights random_llama_weights(const DecoderConfig& config, uint64_t seed, int rank, int ranks) {
  return load_llama_weights(config, random_llama_source(seed), rank, ranks);
}

LlamaWeights load_llama_weights(const DecoderConfig& config, const WeightStore& store, int rank,
                                int ranks) {
  return load_llama_weights(config, store_llama_source(store), rank, ranks);
}

}  // namespace tessera::model
