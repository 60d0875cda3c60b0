// Flux.1 transformer weights under diffusers' names (flux_dit.h): random from a seed, or from a
// WeightStore, through one loader that asks a source for each tensor by name and shape.
#include <cmath>
#include <functional>
#include <string>

#include "tessera/core/error.h"
#include "model/random_weights.h"
#include "tessera/model/flux_dit.h"

namespace tessera::model {
namespace {

using Source = FluxTensorSource;

LinearWeights linear(const Source& source, const std::string& name, int64_t out, int64_t in) {
  return {source(name + ".weight", out, in), source(name + ".bias", out, 1)};
}

void attention(const Source& source, const std::string& p, int64_t c, int64_t d, bool joint,
               FluxAttentionWeights& a) {
  a.q = linear(source, p + "to_q", c, c);
  a.k = linear(source, p + "to_k", c, c);
  a.v = linear(source, p + "to_v", c, c);
  a.norm_q = source(p + "norm_q.weight", d, 1);
  a.norm_k = source(p + "norm_k.weight", d, 1);
  if (!joint) return;
  a.add_q = linear(source, p + "add_q_proj", c, c);
  a.add_k = linear(source, p + "add_k_proj", c, c);
  a.add_v = linear(source, p + "add_v_proj", c, c);
  a.norm_added_q = source(p + "norm_added_q.weight", d, 1);
  a.norm_added_k = source(p + "norm_added_k.weight", d, 1);
  a.out = linear(source, p + "to_out.0", c, c);
  a.add_out = linear(source, p + "to_add_out", c, c);
}

FluxDitWeights load(const FluxConfig& f, const Source& source) {
  const int64_t c = f.inner_dim(), d = f.attention_head_dim;
  TESSERA_CHECK_ARG(c >= 1 && d >= 2 && f.in_channels >= 1 && f.joint_attention_dim >= 1 &&
                        f.pooled_projection_dim >= 1 && f.patch_size >= 1,
                    "Flux config: expected num_attention_heads, attention_head_dim, in_channels, "
                    "joint_attention_dim, pooled_projection_dim and patch_size >= 1");
  const int64_t out_channels = f.out_channels > 0 ? f.out_channels : f.in_channels;
  FluxDitWeights w;
  w.x_embedder = linear(source, "x_embedder", c, f.in_channels);
  w.context_embedder = linear(source, "context_embedder", c, f.joint_attention_dim);
  w.time_1 = linear(source, "time_text_embed.timestep_embedder.linear_1", c, 256);
  w.time_2 = linear(source, "time_text_embed.timestep_embedder.linear_2", c, c);
  if (f.guidance_embeds) {
    w.guidance_1 = linear(source, "time_text_embed.guidance_embedder.linear_1", c, 256);
    w.guidance_2 = linear(source, "time_text_embed.guidance_embedder.linear_2", c, c);
  }
  w.text_1 = linear(source, "time_text_embed.text_embedder.linear_1", c, f.pooled_projection_dim);
  w.text_2 = linear(source, "time_text_embed.text_embedder.linear_2", c, c);
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i) + ".";
    FluxDoubleBlockWeights b;
    b.norm1 = linear(source, p + "norm1.linear", 6 * c, c);
    b.norm1_context = linear(source, p + "norm1_context.linear", 6 * c, c);
    attention(source, p + "attn.", c, d, true, b.attn);
    b.ff_up = linear(source, p + "ff.net.0.proj", 4 * c, c);
    b.ff_down = linear(source, p + "ff.net.2", c, 4 * c);
    b.ff_context_up = linear(source, p + "ff_context.net.0.proj", 4 * c, c);
    b.ff_context_down = linear(source, p + "ff_context.net.2", c, 4 * c);
    w.double_blocks.push_back(std::move(b));
  }
  for (int64_t i = 0; i < f.num_single_layers; ++i) {
    const std::string p = "single_transformer_blocks." + std::to_string(i) + ".";
    FluxSingleBlockWeights b;
    b.norm = linear(source, p + "norm.linear", 3 * c, c);
    attention(source, p + "attn.", c, d, false, b.attn);
    b.proj_mlp = linear(source, p + "proj_mlp", 4 * c, c);
    b.proj_out = linear(source, p + "proj_out", c, 5 * c);
    w.single_blocks.push_back(std::move(b));
  }
  w.norm_out = linear(source, "norm_out.linear", 2 * c, c);
  w.proj_out = linear(source, "proj_out", f.patch_size * f.patch_size * out_channels, c);
  return w;
}

}  // namespace

FluxTensorSource random_flux_source(uint64_t seed) {
  return [seed](const std::string& name, int64_t rows, int64_t cols) {
    const bool norm = name.ends_with("norm_q.weight") || name.ends_with("norm_k.weight") ||
                      name.ends_with("norm_added_q.weight") || name.ends_with("norm_added_k.weight");
    const bool bias = name.ends_with(".bias");
    return random_tensor(seed, name, rows, cols, norm ? 1.0f : 0.0f,
                         norm || bias ? 0.1f : 1.0f / std::sqrt(float(cols)));
  };
}

FluxTensorSource store_flux_source(const WeightStore& store) {
  return [&store](const std::string& name, int64_t rows, int64_t cols) {
    return whole_tensor(store, name, rows, cols);
  };
}

FluxDitWeights load_flux_weights(const FluxConfig& config, const FluxTensorSource& source) {
  return load(config, source);
}

FluxDitWeights random_flux_weights(const FluxConfig& config, uint64_t seed) {
  return load(config, random_flux_source(seed));
}

FluxDitWeights load_flux_weights(const FluxConfig& config, const WeightStore& store) {
  return load(config, store_flux_source(store));
}

std::vector<FluxTensorInfo> flux_tensor_names(const FluxConfig& config) {
  std::vector<FluxTensorInfo> names;
  load(config, [&](const std::string& name, int64_t rows, int64_t cols) {
    names.push_back({name, cols == 1 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols}});
    return std::vector<float>();  // names only: no values held
  });
  return names;
}

}  // namespace tessera::model
