// FluxTransformer (the tensor-level Flux.1 transformer the cuda backend runs) on cpu rank threads
// in float32, against FluxDit, the float32 reference, with the same random weights: every rank's
// prediction rows match within float32 reduction-order noise, on 1, 2 and 4 ranks, with and
// without text tokens; a second step is bitwise the first; bad dtypes and inputs are refused by
// name; replanning the attention for another method keeps the weights.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu_dist_util.h"
#include "tessera/model/flux_dit.h"
#include "tessera/model/flux_transformer.h"

namespace tessera::testing {
namespace {

using model::FluxConditioning;
using model::FluxConfig;
using model::FluxDitShape;

constexpr uint64_t kSeed = 7;

FluxConfig small_flux(bool guidance) {
  FluxConfig f;
  f.patch_size = 1;
  f.in_channels = 8;
  f.out_channels = 8;
  f.num_layers = 2;
  f.num_single_layers = 2;
  f.attention_head_dim = 16;
  f.num_attention_heads = 4;
  f.joint_attention_dim = 12;
  f.pooled_projection_dim = 10;
  f.guidance_embeds = guidance;
  f.axes_dims_rope = {4, 6, 6};
  return f;
}

std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(0.41f * float(i) + float(salt)) * 0.9f;
  return v;
}

FluxConditioning conditioning(const FluxConfig& f) {
  return {0.375f, 4.0f, values(f.pooled_projection_dim, 3)};
}

std::vector<float> rows_of(const std::vector<float>& all, int64_t cols,
                           const std::vector<int64_t>& tokens) {
  std::vector<float> rows;
  for (int64_t t : tokens) rows.insert(rows.end(), all.begin() + t * cols, all.begin() + (t + 1) * cols);
  return rows;
}

TensorView view(std::vector<float>& v, int64_t rows, int64_t cols) {
  return TensorView(v.data(), DType::kF32, Device::cpu(), {rows, cols});
}

struct Case {
  int ranks;
  sp::Method method;
  FluxDitShape shape;
  bool guidance;
};

TEST(FluxTransformerTest, MatchesTheFloat32ReferenceOnEveryRank) {
  for (const Case& k : {Case{1, sp::Method::kRing, {24, 5, 6}, true},
                        Case{1, sp::Method::kRing, {24, 0, 6}, false},
                        Case{2, sp::Method::kUlysses, {24, 5, 6}, true},
                        Case{4, sp::Method::kRing, {24, 5, 4}, false},
                        Case{4, sp::Method::kUsp, {32, 3, 8}, true}}) {
    SCOPED_TRACE(::testing::Message() << k.ranks << " ranks, method " << int(k.method) << ", L "
                                    << k.shape.image_tokens << ", J " << k.shape.text_tokens);
    const FluxConfig f = small_flux(k.guidance);
    const std::vector<float> image = values(k.shape.image_tokens * f.in_channels, 1);
    std::vector<float> text = values(k.shape.text_tokens * f.joint_attention_dim, 2);
    run_cpu_ranks(k.ranks, 1, test_options(), [&](RankContext& ctx) {
      sp::PlanOptions options;
      options.method = k.method;
      model::FluxDit reference(f, model::random_flux_weights(f, kSeed), ctx, k.shape, options);
      model::FluxTransformer model(f, model::random_flux_source(kSeed), ctx, k.shape, DType::kF32,
                                   options);
      ASSERT_EQ(model.local_image_tokens(), reference.local_image_tokens());
      std::vector<float> rows = rows_of(image, f.in_channels, model.local_image_tokens());
      const std::vector<float> want = reference.forward(rows, text, conditioning(f));
      const int64_t n = int64_t(rows.size()) / f.in_channels, out_cols = model.output_columns();
      std::vector<float> got(size_t(n * out_cols), NAN), again = got;
      model.forward(view(rows, n, f.in_channels), view(text, k.shape.text_tokens, f.joint_attention_dim),
                    conditioning(f), view(got, n, out_cols), ctx.stream);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-4f * (1.0f + std::fabs(want[i])))
            << "rank " << ctx.rank << " element " << i;
      model.forward(view(rows, n, f.in_channels), view(text, k.shape.text_tokens, f.joint_attention_dim),
                    conditioning(f), view(again, n, out_cols), ctx.stream);
      EXPECT_EQ(again, got) << "a second step differs";
    });
  }
}

// replan_attention switches the method keeping the weights: the new plan's token layout and
// RoPE tables follow, and each method's rows match the reference.
TEST(FluxTransformerTest, ReplannedAttentionKeepsTheWeights) {
  const FluxConfig f = small_flux(true);
  const FluxDitShape shape{32, 4, 8};
  const std::vector<float> image = values(shape.image_tokens * f.in_channels, 1);
  std::vector<float> text = values(shape.text_tokens * f.joint_attention_dim, 2);
  run_cpu_ranks(4, 1, test_options(), [&](RankContext& ctx) {
    sp::PlanOptions options;
    options.method = sp::Method::kRing;
    model::FluxTransformer model(f, model::random_flux_source(kSeed), ctx, shape, DType::kF32,
                                 options);
    for (sp::Method method : {sp::Method::kUlysses, sp::Method::kUsp, sp::Method::kRing}) {
      options.method = method;
      model.replan_attention(options);
      model::FluxDit reference(f, model::random_flux_weights(f, kSeed), ctx, shape, options);
      ASSERT_EQ(model.local_image_tokens(), reference.local_image_tokens());
      std::vector<float> rows = rows_of(image, f.in_channels, model.local_image_tokens());
      const std::vector<float> want = reference.forward(rows, text, conditioning(f));
      const int64_t n = int64_t(rows.size()) / f.in_channels, out_cols = model.output_columns();
      std::vector<float> got(size_t(n * out_cols), NAN);
      model.forward(view(rows, n, f.in_channels), view(text, shape.text_tokens, f.joint_attention_dim),
                    conditioning(f), view(got, n, out_cols), ctx.stream);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-4f * (1.0f + std::fabs(want[i])))
            << "method " << int(method) << ", rank " << ctx.rank << ", element " << i;
    }
  });
}

TEST(FluxTransformerTest, BadDtypesAndInputsAreRefusedByName) {
  const FluxConfig f = small_flux(true);
  const FluxDitShape shape{24, 5, 6};
  run_cpu_ranks(1, 1, test_options(), [&](RankContext& ctx) {
    expect_error([&] { model::FluxTransformer(f, model::random_flux_source(kSeed), ctx, shape, DType::kBF16); },
                 ErrorCode::kInvalidArgument, {"dtype = bf16", "f32 on the cpu backend"});
    expect_error([&] { model::FluxTransformer(f, model::random_flux_source(kSeed), ctx, {24, 5, 7}, DType::kF32); },
                 ErrorCode::kInvalidArgument, {"grid_width = 7"});
    model::FluxTransformer model(f, model::random_flux_source(kSeed), ctx, shape, DType::kF32);
    std::vector<float> image(size_t(24 * 8)), text(size_t(5 * 12)), out(size_t(24 * 8));
    expect_error([&] {
      model.forward(view(image, 24, 7), view(text, 5, 12), conditioning(f), view(out, 24, 8), ctx.stream);
    }, ErrorCode::kInvalidArgument, {"image = f32[24, 7]", "expected contiguous f32[24, 8]"});
    FluxConditioning c = conditioning(f);
    c.pooled.pop_back();
    expect_error([&] {
      model.forward(view(image, 24, 8), view(text, 5, 12), c, view(out, 24, 8), ctx.stream);
    }, ErrorCode::kInvalidArgument, {"conditioning.pooled: 9 values", "pooled_projection_dim = 10"});
  });
}

}  // namespace
}  // namespace tessera::testing
