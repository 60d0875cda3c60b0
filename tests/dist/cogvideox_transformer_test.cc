// CogVideoXTransformer (the tensor-level CogVideoX blocks the cuda backend runs) on cpu rank
// threads in float32, against a stack of CogVideoXBlock, the float32 reference, with the same
// random weights: every rank's video rows and the text rows match within float32
// reduction-order noise, on 1, 2 and 4 ranks, with and without text tokens and the norms'
// affine terms; a second step is bitwise the first; bad dtypes, RoPE configs and inputs are
// refused by name; replanning the attention for another method keeps the weights.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "cpu_dist_util.h"
#include "tessera/model/cogvideox_block.h"
#include "tessera/model/cogvideox_transformer.h"

namespace tessera::testing {
namespace {

using model::CogVideoXConfig;

constexpr uint64_t kSeed = 5;

CogVideoXConfig small_cogvideox(bool affine) {
  CogVideoXConfig f;
  f.num_attention_heads = 4;
  f.attention_head_dim = 16;
  f.num_layers = 2;
  f.time_embed_dim = 24;
  f.norm_elementwise_affine = affine;
  return f;
}

std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(0.37f * float(i) + float(salt)) * 0.9f;
  return v;
}

std::vector<float> rows_of(const std::vector<float>& all, int64_t cols,
                           const std::vector<int64_t>& tokens) {
  std::vector<float> rows;
  for (int64_t t : tokens)
    rows.insert(rows.end(), all.begin() + t * cols, all.begin() + (t + 1) * cols);
  return rows;
}

TensorView view(std::vector<float>& v, int64_t rows, int64_t cols) {
  return TensorView(v.data(), DType::kF32, Device::cpu(), {rows, cols});
}

model::CogVideoXTransformer::BlockSource random_blocks(const CogVideoXConfig& f) {
  return [f](int64_t i) { return model::random_cogvideox_block(f, i, kSeed); };
}

// The reference: the config's blocks over this rank's rows, in place.
void reference_step(const CogVideoXConfig& f, RankContext& ctx, int64_t video, int64_t text,
                    const sp::PlanOptions& options, std::vector<float>& rows,
                    std::vector<float>& text_rows, const std::vector<float>& temb,
                    std::vector<int64_t>& tokens) {
  const std::unique_ptr<sp::SpAttention> attention = sp::SpAttention::create(
      ctx, sp::joint_attention_request(video, text, f.num_attention_heads, f.attention_head_dim,
                                       DType::kF32, options));
  tokens = attention->local_sequence_tokens();
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const model::CogVideoXBlock block(f, model::random_cogvideox_block(f, i, kSeed), *attention);
    block.forward(rows, text_rows, temb, {}, {});
  }
}

struct Case {
  int ranks;
  sp::Method method;
  int64_t video, text;
  bool affine;
};

TEST(CogVideoXTransformerTest, MatchesTheFloat32BlocksOnEveryRank) {
  for (const Case& k :
       {Case{1, sp::Method::kRing, 24, 5, true}, Case{1, sp::Method::kRing, 24, 0, false},
        Case{2, sp::Method::kUlysses, 24, 6, true}, Case{4, sp::Method::kRing, 32, 3, false},
        Case{4, sp::Method::kUsp, 32, 4, true}}) {
    SCOPED_TRACE(::testing::Message()
                 << k.ranks << " ranks, method " << int(k.method) << ", L " << k.video << ", J "
                 << k.text << (k.affine ? ", affine norms" : ""));
    const CogVideoXConfig f = small_cogvideox(k.affine);
    const int64_t c = f.inner_dim();
    const std::vector<float> video = values(k.video * c, 1), temb = values(f.time_embed_dim, 3);
    run_cpu_ranks(k.ranks, 1, test_options(), [&](RankContext& ctx) {
      sp::PlanOptions options;
      options.method = k.method;
      model::CogVideoXTransformer model(f, random_blocks(f), ctx, k.video, k.text, DType::kF32,
                                        options);
      std::vector<int64_t> tokens;
      std::vector<float> want = rows_of(video, c, model.local_video_tokens());
      std::vector<float> want_text = values(k.text * c, 2);
      reference_step(f, ctx, k.video, k.text, options, want, want_text, temb, tokens);
      ASSERT_EQ(model.local_video_tokens(), tokens);
      const int64_t n = int64_t(tokens.size());
      std::vector<float> got = rows_of(video, c, tokens), got_text = values(k.text * c, 2);
      model.forward(view(got, n, c), view(got_text, k.text, c), temb, ctx.stream);
      auto expect_near = [&](const std::vector<float>& g, const std::vector<float>& w,
                             const char* what) {
        ASSERT_EQ(g.size(), w.size()) << what;
        for (size_t i = 0; i < g.size(); ++i)
          ASSERT_NEAR(g[i], w[i], 2e-4f * (1.0f + std::fabs(w[i])))
              << what << ", rank " << ctx.rank << ", element " << i;
      };
      expect_near(got, want, "video rows");
      expect_near(got_text, want_text, "text rows");
      std::vector<float> again = rows_of(video, c, tokens), again_text = values(k.text * c, 2);
      model.forward(view(again, n, c), view(again_text, k.text, c), temb, ctx.stream);
      EXPECT_EQ(again, got) << "a second step differs";
      EXPECT_EQ(again_text, got_text) << "a second step differs (text)";
    });
  }
}

TEST(CogVideoXTransformerTest, ReplannedAttentionKeepsTheWeights) {
  const CogVideoXConfig f = small_cogvideox(true);
  const int64_t c = f.inner_dim(), video_tokens = 32, text = 4;
  const std::vector<float> video = values(video_tokens * c, 1), temb = values(f.time_embed_dim, 3);
  run_cpu_ranks(4, 1, test_options(), [&](RankContext& ctx) {
    sp::PlanOptions options;
    options.method = sp::Method::kRing;
    model::CogVideoXTransformer model(f, random_blocks(f), ctx, video_tokens, text, DType::kF32,
                                      options);
    for (sp::Method method : {sp::Method::kUlysses, sp::Method::kUsp}) {
      options.method = method;
      model.replan_attention(options);
      std::vector<int64_t> tokens;
      std::vector<float> want = rows_of(video, c, model.local_video_tokens());
      std::vector<float> want_text = values(text * c, 2);
      reference_step(f, ctx, video_tokens, text, options, want, want_text, temb, tokens);
      ASSERT_EQ(model.local_video_tokens(), tokens);
      std::vector<float> got = rows_of(video, c, tokens), got_text = values(text * c, 2);
      model.forward(view(got, int64_t(tokens.size()), c), view(got_text, text, c), temb,
                    ctx.stream);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-4f * (1.0f + std::fabs(want[i])))
            << "method " << int(method) << ", rank " << ctx.rank << ", element " << i;
    }
  });
}

TEST(CogVideoXTransformerTest, BadDtypesConfigsAndInputsAreRefusedByName) {
  const CogVideoXConfig f = small_cogvideox(true);
  run_cpu_ranks(1, 1, test_options(), [&](RankContext& ctx) {
    expect_error(
        [&] { model::CogVideoXTransformer(f, random_blocks(f), ctx, 24, 5, DType::kBF16); },
        ErrorCode::kInvalidArgument, {"dtype = bf16", "f32 on the cpu backend"});
    CogVideoXConfig rope = f;
    rope.use_rotary_positional_embeddings = true;
    expect_error(
        [&] { model::CogVideoXTransformer(rope, random_blocks(f), ctx, 24, 5, DType::kF32); },
        ErrorCode::kUnsupported, {"use_rotary_positional_embeddings", "CogVideoX-2B"});
    expect_error([&] { model::CogVideoXTransformer(f, random_blocks(f), ctx, 0, 5, DType::kF32); },
                 ErrorCode::kInvalidArgument, {"video_tokens = 0"});
    model::CogVideoXTransformer model(f, random_blocks(f), ctx, 24, 5, DType::kF32);
    const int64_t c = f.inner_dim();
    std::vector<float> video(size_t(24 * c)), text(size_t(5 * c)), temb(size_t(f.time_embed_dim));
    expect_error([&] { model.forward(view(video, 24, c - 1), view(text, 5, c), temb, ctx.stream); },
                 ErrorCode::kInvalidArgument,
                 {"video = f32[24, 63]", "expected contiguous f32[24, 64]"});
    temb.pop_back();
    expect_error([&] { model.forward(view(video, 24, c), view(text, 5, c), temb, ctx.stream); },
                 ErrorCode::kInvalidArgument, {"temb: 23 values", "time_embed_dim = 24"});
  });
}

}  // namespace
}  // namespace tessera::testing
