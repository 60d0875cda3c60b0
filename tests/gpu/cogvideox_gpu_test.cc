// CogVideoXTransformer on the cuda backend in bf16 (CogVideoX-shaped blocks at head_dim 64, two
// blocks, 64 video and 8 text tokens) against a stack of CogVideoXBlock, the float32 cpu
// reference, with the same random weights; sequence parallel over up to 2 GPUs (one worker
// process per GPU, as flux_gpu_test.cc). Every rank's video rows and the text rows are within
// bf16 error of the reference (max error at most 3% of the largest value), and a second step
// from the same inputs is bitwise the first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "gpu/bf16_tensors.h"
#include "gpu/gpu_workers.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/model/cogvideox_block.h"
#include "tessera/model/cogvideox_transformer.h"
#include "tessera/runtime/memory.h"

namespace tessera::model {
namespace {

constexpr uint64_t kSeed = 13;
constexpr int64_t kVideo = 64, kText = 8;

CogVideoXConfig config() {
  CogVideoXConfig f;
  f.num_attention_heads = 2;
  f.attention_head_dim = 64;
  f.num_layers = 2;
  f.time_embed_dim = 48;
  return f;
}

std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(0.31f * float(i) + float(salt));
  return v;
}

using testing::download_bf16;
using testing::upload_bf16;

TEST(CogVideoXGpu, MatchesTheFloat32Blocks) {
  TESSERA_REQUIRE_GPUS(testing::gpus_for_test(2), 1);
  testing::run_gpu_workers("CogVideoXGpuWorker", "MatchesTheFloat32Blocks",
                           testing::gpus_for_test(2), 120000);
}

TEST(CogVideoXGpuWorker, MatchesTheFloat32Blocks) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by CogVideoXGpu.*";
  const CogVideoXConfig f = config();
  const int64_t c = f.inner_dim();
  const std::vector<float> video = values(kVideo * c, 1), temb = values(f.time_embed_dim, 3);
  // The reference: the blocks on one cpu rank over every video token.
  std::vector<float> want = video, want_text = values(kText * c, 2);
  run_cpu_ranks(1, 1, ContextOptions{}, [&](RankContext& cpu) {
    const std::unique_ptr<sp::SpAttention> attention = sp::SpAttention::create(
        cpu, sp::joint_attention_request(kVideo, kText, f.num_attention_heads, f.attention_head_dim,
                                         DType::kF32));
    for (int64_t i = 0; i < f.num_layers; ++i)
      CogVideoXBlock(f, random_cogvideox_block(f, i, kSeed), *attention)
          .forward(want, want_text, temb, {}, {});
  });
  ContextOptions options;
  options.heap_bytes = size_t(256) << 20;
  std::unique_ptr<RankContext> ctx =
      create_cuda_context(bootstrap_from_launch(detect_launch()), options);
  {
    CogVideoXTransformer model(
        f, [&](int64_t i) { return random_cogvideox_block(f, i, kSeed); }, *ctx, kVideo, kText,
        DType::kBF16);
    const std::vector<int64_t>& tokens = model.local_video_tokens();
    const int64_t n = int64_t(tokens.size());
    std::vector<float> rows;
    for (int64_t t : tokens)
      rows.insert(rows.end(), video.begin() + t * c, video.begin() + (t + 1) * c);
    auto step = [&](Tensor& x, Tensor& text) {
      x = upload_bf16(rows, n, c, *ctx);
      text = upload_bf16(values(kText * c, 2), kText, c, *ctx);
      model.forward(x, text.view(), temb, ctx->stream);
      return std::pair{download_bf16(x, *ctx), download_bf16(text, *ctx)};
    };
    Tensor x, text;
    const auto [got, got_text] = step(x, text);
    double largest = 0, worst = 0;
    for (float w : want) largest = std::max(largest, double(std::fabs(w)));
    for (float w : want_text) largest = std::max(largest, double(std::fabs(w)));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t ch = 0; ch < c; ++ch) {
        const double g = got[size_t(r * c + ch)], w = want[size_t(tokens[size_t(r)] * c + ch)];
        ASSERT_TRUE(std::isfinite(g)) << "row " << r << " channel " << ch;
        worst = std::max(worst, std::fabs(g - w));
      }
    for (size_t i = 0; i < got_text.size(); ++i)
      worst = std::max(worst, std::fabs(double(got_text[i]) - want_text[i]));
    std::printf("rank %d: %lld rows, max error %.4g of largest %.4g (%s)\n", ctx->rank,
                static_cast<long long>(n), worst, largest,
                model.attention_plan().summary().c_str());
    EXPECT_LE(worst, 0.03 * largest);
    Tensor x2, text2;
    const auto [again, again_text] = step(x2, text2);
    EXPECT_EQ(again, got) << "a second step differs";
    EXPECT_EQ(again_text, got_text) << "a second step differs (text)";
  }
  ctx->bootstrap->barrier();
  std::fflush(stdout);
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
}

}  // namespace
}  // namespace tessera::model
