// The attention reference at the head dimensions of issue 17 (64, 128, 256) against a naive
// float64 computation: odd sequence lengths, causal (bottom-right aligned and offset) and not,
// GQA, f32 and bf16 inputs, through reference_attention and the cpu backend's forward.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/attn/attention.h"
#include "tessera/attn/reference.h"
#include "tessera/core/error.h"
#include "unit/attn_test_util.h"

namespace tessera::attn {
namespace {

struct Case {
  int64_t b, lq, lkv, hq, hkv;
  bool causal;
};

TEST(AttnHeadDim, ReferenceMatchesFloat64AtHeadDims64To256) {
  const Stream cpu = Stream::cpu();
  uint32_t seed = 100;
  const std::vector<Case> cases = {{1, 1, 1, 1, 1, false},  {1, 7, 13, 2, 1, false},
                                   {2, 13, 13, 4, 2, true}, {1, 5, 11, 3, 3, true},
                                   {1, 9, 3, 2, 2, true},   {1, 17, 17, 2, 1, false}};
  for (int64_t d : {64, 128, 256}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (const Case& c : cases) {
        Tensor q = random_tensor({c.b, c.lq, c.hq, d}, dtype, seed++);
        Tensor k = random_tensor({c.b, c.lkv, c.hkv, d}, dtype, seed++);
        Tensor v = random_tensor({c.b, c.lkv, c.hkv, d}, dtype, seed++);
        // Bottom-right causal: query i sits at position lkv - lq + i; with lq > lkv the first
        // rows see no key.
        const MaskSpec mask = c.causal ? MaskSpec::causal_at(c.lkv - c.lq, 0) : MaskSpec::none();
        const float scale = default_softmax_scale(d);
        const Naive want = naive(q, k, v, mask, scale);
        const std::string where =
            str(dtype_name(dtype), " d ", d, " b ", c.b, " lq ", c.lq, " lkv ", c.lkv, " hq ", c.hq,
                " hkv ", c.hkv, " causal ", c.causal);

        // reference_attention: f32 output, so the only error is float32 accumulation over D
        // terms (dot products of |x| <= 1: a few 1e-7 relative) and over the keys.
        const KvChunk chunk{k, v, mask};
        const ReferenceResult r =
            reference_attention(q, std::span<const KvChunk>(&chunk, 1), scale);
        ASSERT_EQ(r.head_dim, d);
        Tensor o32 = Tensor::empty({c.b, c.lq, c.hq, d}, DType::kF32, Device::cpu());
        Tensor lse32 = Tensor::empty({c.b, c.hq, c.lq}, DType::kF32, Device::cpu());
        std::copy(r.o.begin(), r.o.end(), o32.data_as<float>());
        std::copy(r.lse.begin(), r.lse.end(), lse32.data_as<float>());
        auto [eo, el] = max_errors(o32, lse32, want);
        EXPECT_LE(eo, 2e-6) << where;
        EXPECT_LE(el, 4e-6) << where;

        // The cpu backend's forward writes o in q's dtype: bf16 adds its output rounding
        // (half a step, 2^-9 relative, of |o| <= 1).
        Tensor o = filled({c.b, c.lq, c.hq, d}, dtype, NAN);
        Tensor lse = filled({c.b, c.hq, c.lq}, DType::kF32, NAN);
        forward(q, k, v, o, lse, mask, scale, cpu);
        Tensor of = Tensor::empty({c.b, c.lq, c.hq, d}, DType::kF32, Device::cpu());
        for (int64_t i = 0; i < of.view().numel(); ++i)
          of.data_as<float>()[i] = load_as_float(o.data(), dtype, i);
        auto [fo, fl] = max_errors(of, lse, want);
        EXPECT_LE(fo, dtype == DType::kF32 ? 2e-6 : 2e-6 + 1.0 / 512) << where;
        EXPECT_LE(fl, 4e-6) << where;
      }
    }
  }
}

// Rows that see keys must differ from zero (the reference wrote them); with causal lq > lkv,
// the first lq - lkv rows see nothing and give o = 0, lse = -inf at D = 256 as at any D.
TEST(AttnHeadDim, CausalRowsWithoutKeysAtHeadDim256) {
  const int64_t d = 256, lq = 9, lkv = 3;
  Tensor q = random_tensor({1, lq, 2, d}, DType::kBF16, 7);
  Tensor k = random_tensor({1, lkv, 1, d}, DType::kBF16, 8);
  Tensor v = random_tensor({1, lkv, 1, d}, DType::kBF16, 9);
  const KvChunk chunk{k, v, MaskSpec::causal_at(lkv - lq, 0)};
  const ReferenceResult r =
      reference_attention(q, std::span<const KvChunk>(&chunk, 1), default_softmax_scale(d));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      double norm = 0;
      for (int64_t x = 0; x < d; ++x) norm += std::abs(r.o_at(0, i, h, x));
      if (i < lq - lkv) {
        EXPECT_EQ(norm, 0.0) << "row " << i;
        EXPECT_EQ(r.lse_at(0, h, i), -kInf) << "row " << i;
      } else {
        EXPECT_GT(norm, 0.0) << "row " << i;
        EXPECT_TRUE(std::isfinite(r.lse_at(0, h, i))) << "row " << i;
      }
    }
}

}  // namespace
}  // namespace tessera::attn
