// FluxTransformer on the cuda backend in bf16 (a Flux.1-shaped transformer at head_dim 64, two
// double- and two single-stream blocks, 64 image and 8 text tokens) against FluxDit, the float32
// cpu reference, with the same random weights; sequence parallel over up to 2 GPUs (one worker
// process per GPU, as sp_gpu_test.cc). Every rank's prediction rows are within bf16 error of the
// reference (max error at most 3% of the largest value), and a second step is bitwise the
// first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu/bf16_tensors.h"
#include "gpu/gpu_workers.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/comm/context.h"
#include "tessera/core/buffer.h"
#include "tessera/model/flux_dit.h"
#include "tessera/model/flux_transformer.h"
#include "tessera/runtime/memory.h"

namespace tessera::model {
namespace {

constexpr uint64_t kSeed = 11;
const FluxDitShape kShape{64, 8, 8};

FluxConfig config() {
  FluxConfig f;
  f.patch_size = 1;
  f.in_channels = f.out_channels = 16;
  f.num_layers = 2;
  f.num_single_layers = 2;
  f.attention_head_dim = 64;
  f.num_attention_heads = 2;
  f.joint_attention_dim = 32;
  f.pooled_projection_dim = 24;
  f.guidance_embeds = true;
  f.axes_dims_rope = {16, 24, 24};
  return f;
}

std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(0.29f * float(i) + float(salt));
  return v;
}

const FluxConditioning kConditioning{0.5f, 3.5f, values(24, 3)};

using testing::download_bf16;
using testing::upload_bf16;

TEST(FluxGpu, MatchesTheFloat32Reference) {
  TESSERA_REQUIRE_GPUS(testing::gpus_for_test(2), 1);
  testing::run_gpu_workers("FluxGpuWorker", "MatchesTheFloat32Reference",
                           testing::gpus_for_test(2), 120000);
}

TEST(FluxGpuWorker, MatchesTheFloat32Reference) {
  if (!launched_as_worker()) GTEST_SKIP() << "runs inside the workers started by FluxGpu.*";
  const FluxConfig f = config();
  const std::vector<float> image = values(kShape.image_tokens * f.in_channels, 1);
  const std::vector<float> text = values(kShape.text_tokens * f.joint_attention_dim, 2);
  std::vector<float> want;  // [L, out] by image token, from one cpu rank
  ContextOptions cpu_options;
  cpu_options.heap_bytes = size_t(64) << 20;
  run_cpu_ranks(1, 1, cpu_options, [&](RankContext& cpu) {
    FluxDit reference(f, random_flux_weights(f, kSeed), cpu, kShape);
    want = reference.forward(image, text, kConditioning);
  });
  ContextOptions options;
  options.heap_bytes = size_t(256) << 20;
  std::unique_ptr<RankContext> ctx =
      create_cuda_context(bootstrap_from_launch(detect_launch()), options);
  {
    FluxTransformer model(f, random_flux_source(kSeed), *ctx, kShape, DType::kBF16);
    const std::vector<int64_t>& tokens = model.local_image_tokens();
    const int64_t n = int64_t(tokens.size()), cols = model.output_columns();
    std::vector<float> rows;
    for (int64_t t : tokens)
      rows.insert(rows.end(), image.begin() + t * f.in_channels, image.begin() + (t + 1) * f.in_channels);
    const Tensor x = upload_bf16(rows, n, f.in_channels, *ctx);
    const Tensor c = upload_bf16(text, kShape.text_tokens, f.joint_attention_dim, *ctx);
    const Tensor out = Tensor::empty({n, cols}, DType::kBF16, ctx->device);
    model.forward(x, c, kConditioning, out, ctx->stream);
    const std::vector<float> got = download_bf16(out, *ctx);
    double largest = 0, worst = 0;
    for (float w : want) largest = std::max(largest, double(std::fabs(w)));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t ch = 0; ch < cols; ++ch) {
        const double g = got[size_t(r * cols + ch)], w = want[size_t(tokens[size_t(r)] * cols + ch)];
        ASSERT_TRUE(std::isfinite(g)) << "row " << r << " channel " << ch;
        worst = std::max(worst, std::fabs(g - w));
      }
    std::printf("rank %d: %lld rows, max error %.4g of largest %.4g (%s)\n", ctx->rank,
                static_cast<long long>(n), worst, largest, model.attention_plan().summary().c_str());
    EXPECT_LE(worst, 0.03 * largest);
    model.forward(x, c, kConditioning, out, ctx->stream);
    EXPECT_EQ(download_bf16(out, *ctx), got) << "a second step differs";
  }
  ctx->bootstrap->barrier();
  std::fflush(stdout);
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
}

}  // namespace
}  // namespace tessera::model
