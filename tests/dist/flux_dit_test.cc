// FluxDit (Flux.1's transformer: double- and single-stream blocks, joint text tokens, 3-axis
// RoPE) sequence parallel over 1, 2 and 4 rank threads of the cpu backend: a 2-block model with
// random weights gives every rank's image rows as the single-rank run gives them, within float32
// reduction-order noise, under ring, Ulysses, USP, TAS, Mesh and the automatic choice, on one
// machine and on two emulated machines; repeated calls are bitwise alike; bad configurations
// and shapes are refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <filesystem>
#include <unistd.h>

#include "cpu_dist_util.h"
#include "tessera/model/flux_dit.h"
#include "tessera/model/safetensors.h"

namespace tessera::testing {
namespace {

using model::FluxConditioning;
using model::FluxConfig;
using model::FluxDit;
using model::FluxDitShape;

constexpr uint64_t kSeed = 5;

FluxConfig tiny_flux() {
  FluxConfig f;
  f.patch_size = 1;
  f.in_channels = 8;
  f.out_channels = 8;
  f.num_layers = 1;
  f.num_single_layers = 1;
  f.attention_head_dim = 16;
  f.num_attention_heads = 4;
  f.joint_attention_dim = 12;
  f.pooled_projection_dim = 10;
  f.guidance_embeds = true;
  f.axes_dims_rope = {4, 6, 6};
  return f;
}

const FluxDitShape kShape{24, 5, 6};  // a 4 x 6 latent grid, 5 text tokens

std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(0.37f * float(i) + float(salt)) * 0.8f;
  return v;
}

FluxConditioning conditioning(const FluxConfig& f) {
  return {0.625f, 3.5f, values(f.pooled_projection_dim, 3)};
}

// This rank's rows of the image latents, in its local order.
std::vector<float> image_rows(const FluxDit& dit, const FluxConfig& f) {
  const std::vector<float> all = values(kShape.image_tokens * f.in_channels, 1);
  std::vector<float> rows;
  for (int64_t t : dit.local_image_tokens())
    rows.insert(rows.end(), all.begin() + t * f.in_channels, all.begin() + (t + 1) * f.in_channels);
  return rows;
}

// The single-rank prediction [L, out], by image token.
std::vector<float> single_rank_prediction(const FluxConfig& f) {
  std::vector<float> out;
  run_cpu_ranks(1, 1, test_options(), [&](RankContext& ctx) {
    FluxDit dit(f, model::random_flux_weights(f, kSeed), ctx, kShape);
    out = dit.forward(image_rows(dit, f), values(kShape.text_tokens * f.joint_attention_dim, 2),
                      conditioning(f));
  });
  return out;
}

TEST(FluxDitTest, SingleRankPredictionIsFiniteAndDependsOnItsInputs) {
  const FluxConfig f = tiny_flux();
  const std::vector<float> out = single_rank_prediction(f);
  ASSERT_EQ(int64_t(out.size()), kShape.image_tokens * f.out_channels);
  double magnitude = 0;
  for (float v : out) {
    ASSERT_TRUE(std::isfinite(v));
    magnitude += std::fabs(v);
  }
  EXPECT_GT(magnitude, 1e-3);
  // Another timestep changes the prediction (the conditioning reaches the blocks).
  std::vector<float> other;
  run_cpu_ranks(1, 1, test_options(), [&](RankContext& ctx) {
    FluxDit dit(f, model::random_flux_weights(f, kSeed), ctx, kShape);
    FluxConditioning c = conditioning(f);
    c.timestep = 0.25f;
    other = dit.forward(image_rows(dit, f), values(kShape.text_tokens * f.joint_attention_dim, 2), c);
  });
  EXPECT_NE(other, out);
}

struct Case {
  int ranks, machines;
  sp::Method method;
};

TEST(FluxDitTest, SequenceParallelRanksMatchTheSingleRankRun) {
  const FluxConfig f = tiny_flux();
  const std::vector<float> want = single_rank_prediction(f);
  const int64_t out_ch = f.out_channels;
  for (const Case& k : {Case{2, 1, sp::Method::kRing}, Case{2, 1, sp::Method::kUlysses},
                        Case{4, 1, sp::Method::kRing}, Case{4, 1, sp::Method::kUlysses},
                        Case{4, 1, sp::Method::kUsp}, Case{4, 2, sp::Method::kTas},
                        Case{4, 1, sp::Method::kMesh}, Case{4, 2, sp::Method::kAuto}}) {
    SCOPED_TRACE(::testing::Message() << k.ranks << " ranks, " << k.machines << " machines, method "
                                    << int(k.method));
    std::vector<int64_t> covered(size_t(kShape.image_tokens), 0);
    run_cpu_ranks(k.ranks, k.machines, test_options(), [&](RankContext& ctx) {
      sp::PlanOptions options;
      options.method = k.method;
      FluxDit dit(f, model::random_flux_weights(f, kSeed), ctx, kShape, options);
      const std::vector<float> image = image_rows(dit, f);
      const std::vector<float> text = values(kShape.text_tokens * f.joint_attention_dim, 2);
      const std::vector<float> got = dit.forward(image, text, conditioning(f));
      const std::vector<int64_t>& tokens = dit.local_image_tokens();
      ASSERT_EQ(got.size(), tokens.size() * size_t(out_ch));
      for (size_t r = 0; r < tokens.size(); ++r) {
        ++covered[size_t(tokens[r])];
        for (int64_t ch = 0; ch < out_ch; ++ch) {
          const float w = want[size_t(tokens[r] * out_ch + ch)];
          const float g = got[r * size_t(out_ch) + size_t(ch)];
          ASSERT_NEAR(g, w, 2e-4f * (1.0f + std::fabs(w)))
              << "rank " << ctx.rank << " token " << tokens[r] << " channel " << ch << " ("
              << dit.attention_plan().summary() << ")";
        }
      }
      EXPECT_EQ(dit.forward(image, text, conditioning(f)), got) << "a second call differs";
    });
    for (int64_t t = 0; t < kShape.image_tokens; ++t)
      EXPECT_EQ(covered[size_t(t)], 1) << "image token " << t << " held by " << covered[size_t(t)] << " ranks";
  }
}

TEST(FluxDitTest, BadConfigurationsAndShapesAreRefusedByName) {
  run_cpu_ranks(1, 1, test_options(), [&](RankContext& ctx) {
    FluxConfig f = tiny_flux();
    f.axes_dims_rope = {4, 6, 8};
    expect_error([&] { FluxDit(f, model::random_flux_weights(tiny_flux(), kSeed), ctx, kShape); },
                 ErrorCode::kInvalidArgument, {"axes_dims_rope", "attention_head_dim = 16"});
    f = tiny_flux();
    expect_error([&] { FluxDit(f, model::random_flux_weights(f, kSeed), ctx, {24, 5, 7}); },
                 ErrorCode::kInvalidArgument, {"grid_width = 7", "24 image tokens"});
    FluxConfig more = f;
    more.num_single_layers = 2;
    expect_error([&] { FluxDit(more, model::random_flux_weights(f, kSeed), ctx, kShape); },
                 ErrorCode::kInvalidArgument, {"num_single_layers = 2"});
    FluxDit dit(f, model::random_flux_weights(f, kSeed), ctx, kShape);
    expect_error([&] { dit.forward({1.0f}, {}, conditioning(f)); }, ErrorCode::kInvalidArgument,
                 {"image:", "in_channels 8"});
  });
}

// A diffusers-named safetensors file: every tensor lands in its field (checked on a few, by
// value); a missing tensor and a wrong shape are refused naming the tensor.
TEST(FluxDitTest, WeightsLoadFromDiffusersNamedSafetensors) {
  const FluxConfig f = tiny_flux();
  const std::vector<model::FluxTensorInfo> names = model::flux_tensor_names(f);
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : names[i].shape) n *= d;
    data.push_back(values(n, int(i)));
  }
  auto write = [&](const std::string& path, const std::string& skip, bool bad_shape) {
    std::vector<model::NamedTensor> entries;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i].name == skip) continue;
      std::vector<int64_t> shape = names[i].shape;
      if (bad_shape && names[i].name == "x_embedder.weight") shape = {shape[1], shape[0]};
      entries.push_back({names[i].name,
                         TensorView::contiguous(data[i].data(), DType::kF32, Device::cpu(),
                                                shape.data(), int(shape.size()))});
    }
    model::write_safetensors(path, entries);
  };
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tessera_flux_tiny_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  auto index = [&](const std::string& name) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i].name == name) return i;
    ADD_FAILURE() << "no tensor " << name;
    return size_t(0);
  };
  write(path, "", false);
  const model::FluxDitWeights w = model::load_flux_weights(f, model::WeightStore::open(path));
  EXPECT_EQ(w.x_embedder.weight, data[index("x_embedder.weight")]);
  EXPECT_EQ(w.double_blocks[0].attn.norm_added_k,
            data[index("transformer_blocks.0.attn.norm_added_k.weight")]);
  EXPECT_EQ(w.single_blocks[0].proj_out.bias,
            data[index("single_transformer_blocks.0.proj_out.bias")]);
  EXPECT_EQ(w.guidance_2.weight,
            data[index("time_text_embed.guidance_embedder.linear_2.weight")]);
  EXPECT_EQ(w.norm_out.weight, data[index("norm_out.linear.weight")]);
  write(path, "transformer_blocks.0.ff_context.net.2.bias", false);
  expect_error([&] { model::load_flux_weights(f, model::WeightStore::open(path)); },
               ErrorCode::kInvalidArgument, {"transformer_blocks.0.ff_context.net.2.bias"});
  write(path, "", true);
  expect_error([&] { model::load_flux_weights(f, model::WeightStore::open(path)); },
               ErrorCode::kInvalidArgument, {"x_embedder.weight"});
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera::testing
