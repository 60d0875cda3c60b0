// The varlen attention reference (attn/varlen.h): a packed batch with lengths 0, 1 and odd ones
// (queries longer and shorter than keys, GQA, strided views) equals running each sequence alone
// through reference_attention, bit for bit, causal (bottom-right) and not; the bottom-right
// alignment checked against the naive formula; every bad cu_seqlens refused by name and index;
// forward_varlen on a cpu stream writes the reference's result into o and lse, and refuses bad
// outputs and placements by name.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tessera/attn/varlen.h"
#include "tessera/core/error.h"
#include "tessera/runtime/stream.h"
#include "unit/attn_test_util.h"

namespace tessera::attn {
namespace {

Tensor cu_tensor(const std::vector<int32_t>& cu) {
  Tensor t = Tensor::empty({int64_t(cu.size())}, DType::kI32, Device::cpu());
  std::memcpy(t.data(), cu.data(), cu.size() * 4);
  return t;
}

// Rows [start, start + len) of packed [total, H, D] copied into a contiguous [1, len, H, D].
Tensor sequence_copy(const TensorView& t, int64_t start, int64_t len) {
  Tensor out = Tensor::empty({1, len, t.size(1), t.size(2)}, t.dtype(), Device::cpu());
  int64_t idx = 0;
  for (int64_t l = 0; l < len; ++l)
    for (int64_t h = 0; h < t.size(1); ++h)
      for (int64_t d = 0; d < t.size(2); ++d)
        store_from_float(
            out.data(), t.dtype(), idx++,
            load_as_float(t.data(), t.dtype(), (start + l) * t.stride(0) + h * t.stride(1) + d));
  return out;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AttnVarlen, EqualsEachSequenceAloneBitwise) {
  // Lengths include 0 and 1 on either side, lq > lk (rows without keys when causal), lq < lk.
  const std::vector<int32_t> lens_q = {5, 0, 1, 7, 3, 1, 0, 13};
  const std::vector<int32_t> lens_k = {5, 4, 1, 2, 0, 9, 0, 13};
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (size_t b = 0; b < lens_q.size(); ++b) {
    cu_q.push_back(cu_q.back() + lens_q[b]);
    cu_k.push_back(cu_k.back() + lens_k[b]);
  }
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();
  uint32_t seed = 900;
  for (int64_t d : {64, 256}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool causal : {false, true}) {
        const int64_t hq = 4, hkv = 2;
        // q is a strided view (a slice of a wider packed tensor): the reference must not care.
        Tensor q_wide = random_tensor({total_q, hq + 1, d}, dtype, seed++);
        const TensorView q = q_wide.view().slice(1, 1, hq);
        Tensor k = random_tensor({total_k, hkv, d}, dtype, seed++);
        Tensor v = random_tensor({total_k, hkv, d}, dtype, seed++);
        const float scale = default_softmax_scale(d);
        const VarlenReferenceResult r = reference_attention_varlen(
            q, k, v, cu_tensor(cu_q), cu_tensor(cu_k), 13, 13, causal, scale);
        ASSERT_EQ(r.total_q, total_q);
        ASSERT_EQ(r.o.size(), size_t(total_q * hq * d));
        ASSERT_EQ(r.lse.size(), size_t(hq * total_q));
        for (size_t b = 0; b < lens_q.size(); ++b) {
          const int64_t lq = lens_q[b], lk = lens_k[b];
          if (lq == 0) continue;
          Tensor qs = sequence_copy(q, cu_q[b], lq);
          Tensor ks = sequence_copy(k, cu_k[b], lk), vs = sequence_copy(v, cu_k[b], lk);
          const KvChunk chunk{ks, vs, causal ? MaskSpec::causal_at(lk - lq, 0) : MaskSpec::none()};
          const ReferenceResult want =
              reference_attention(qs, std::span<const KvChunk>(&chunk, 1), scale);
          for (int64_t i = 0; i < lq; ++i)
            for (int64_t h = 0; h < hq; ++h) {
              ASSERT_TRUE(same_bits(r.lse_at(h, cu_q[b] + i), want.lse_at(0, h, i)))
                  << "seq " << b << " row " << i << " head " << h;
              for (int64_t x = 0; x < d; ++x)
                ASSERT_TRUE(same_bits(r.o_at(cu_q[b] + i, h, x), want.o_at(0, i, h, x)))
                    << "seq " << b << " row " << i << " head " << h << " d " << x;
            }
        }
      }
    }
  }
}

// Bottom-right alignment, against the naive formula with its own mask: sequence (lq 3, lk 5):
// query i sees keys 0 .. i + 2; sequence (lq 4, lk 2): queries 0, 1 see nothing, 2 sees key 0,
// 3 sees keys 0, 1.
TEST(AttnVarlen, CausalIsAlignedBottomRight) {
  const std::vector<int32_t> cu_q = {0, 3, 7}, cu_k = {0, 5, 7};
  Tensor q = random_tensor({7, 2, 16}, DType::kF32, 41);
  Tensor k = random_tensor({7, 2, 16}, DType::kF32, 42);
  Tensor v = random_tensor({7, 2, 16}, DType::kF32, 43);
  const float scale = default_softmax_scale(16);
  const VarlenReferenceResult r =
      reference_attention_varlen(q, k, v, cu_tensor(cu_q), cu_tensor(cu_k), 4, 5, true, scale);
  for (int b = 0; b < 2; ++b) {
    const int64_t lq = cu_q[b + 1] - cu_q[b], lk = cu_k[b + 1] - cu_k[b];
    Tensor qs = sequence_copy(q, cu_q[b], lq);
    Tensor ks = sequence_copy(k, cu_k[b], lk), vs = sequence_copy(v, cu_k[b], lk);
    // The mask spelled out: key j visible to query i iff j <= i + lk - lq.
    MaskSpec mask = MaskSpec::causal_at(0, lq - lk);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t j = 0; j < lk; ++j) ASSERT_EQ(!mask.masked(i, j), j <= i + lk - lq);
    const Naive want = naive(qs, ks, vs, mask, scale);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t h = 0; h < 2; ++h) {
        const double lw = want.lse[size_t(h * lq + i)];
        if (std::isinf(lw)) {
          EXPECT_EQ(r.lse_at(h, cu_q[b] + i), -kInf) << "seq " << b << " row " << i;
        } else {
          EXPECT_NEAR(r.lse_at(h, cu_q[b] + i), lw, 1e-5) << "seq " << b << " row " << i;
        }
        for (int64_t x = 0; x < 16; ++x)
          EXPECT_NEAR(r.o_at(cu_q[b] + i, h, x), want.o[size_t((i * 2 + h) * 16 + x)], 1e-6)
              << "seq " << b << " row " << i;
      }
  }
  // Rows 0, 1 of sequence 1 (packed rows 3, 4) see no key: o = 0, lse = -inf.
  for (int64_t t : {3, 4})
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(r.lse_at(h, t), -kInf);
      for (int64_t x = 0; x < 16; ++x) EXPECT_EQ(r.o_at(t, h, x), 0.0f);
    }
}

TEST(AttnVarlen, BadCuSeqlensAreRefusedByNameAndIndex) {
  Tensor q = random_tensor({6, 2, 8}, DType::kBF16, 1);
  Tensor k = random_tensor({5, 1, 8}, DType::kBF16, 2);
  const float s = 0.25f;
  auto run = [&](std::vector<int32_t> cq, std::vector<int32_t> ck, int64_t mq = 6, int64_t mk = 5,
                 const TensorView* kk = nullptr) {
    return error_of([&] {
      reference_attention_varlen(q, kk ? *kk : k.view(), kk ? *kk : k.view(), cu_tensor(cq),
                                 cu_tensor(ck), mq, mk, true, s);
    });
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  EXPECT_EQ(run({0, 2, 6}, {0, 5, 5}), "(no error)");
  EXPECT_PRED2(has, run({1, 2, 6}, {0, 5, 5}), "cu_seqlens_q[0] = 1: expected 0");
  EXPECT_PRED2(has, run({0, 2, 6}, {0, 5, 4}),
               "cu_seqlens_k[2] = 4: expected >= cu_seqlens_k[1] = 5 (non-decreasing)");
  EXPECT_PRED2(has, run({0, 3, 2, 6}, {0, 1, 2, 5}), "cu_seqlens_q[2] = 2: expected >= ");
  EXPECT_PRED2(has, run({0, 2, 5}, {0, 5, 5}), "cu_seqlens_q[2] = 5: expected 6 (total_q");
  EXPECT_PRED2(has, run({0, 7, 6}, {0, 5, 5}), "cu_seqlens_q[1] = 7: expected <= 6 (total_q");
  EXPECT_PRED2(has, run({0, 2, 6}, {0, 2, 3}), "cu_seqlens_k[2] = 3: expected 5 (total_k");
  EXPECT_PRED2(has, run({0, 2, 6}, {0, 5}), "cu_seqlens_k has 2 entries: expected 3");
  EXPECT_PRED2(has, run({0, 2, 6}, {0, 5, 5}, 3),
               "cu_seqlens_q[2] - cu_seqlens_q[1] = 4: expected <= max_seqlen_q = 3");
  EXPECT_PRED2(has, run({0, 2, 6}, {0, 5, 5}, 6, 4),
               "cu_seqlens_k[1] - cu_seqlens_k[0] = 5: expected <= max_seqlen_k = 4");
  EXPECT_PRED2(has, run({0, 2, 6}, {0, 5, 5}, -1), "max_seqlen_q = -1: expected >= 0");
  // Not i32, not 1-D.
  Tensor cu64 = Tensor::empty({3}, DType::kI64, Device::cpu());
  EXPECT_PRED2(has, error_of([&] {
                 reference_attention_varlen(q, k, k, cu64, cu_tensor({0, 5, 5}), 6, 5, false, s);
               }),
               "cu_seqlens_q = i64[3] cpu: expected cpu i32[B + 1]");
  // Packed tensors: heads that do not divide, a 4-D q.
  Tensor k3 = random_tensor({5, 3, 8}, DType::kBF16, 3);
  EXPECT_PRED2(has, run({0, 2, 6}, {0, 5, 5}, 6, 5, &k3.view()),
               "has 3 heads: expected a divisor of q's 2");
  Tensor q4 = random_tensor({1, 6, 2, 8}, DType::kBF16, 4);
  EXPECT_PRED2(
      has, error_of([&] {
        reference_attention_varlen(q4, k, k, cu_tensor({0, 6}), cu_tensor({0, 5}), 6, 5, false, s);
      }),
      "q = bf16[1, 6, 2, 8] cpu: expected [total, H, D]");
}

TEST(AttnVarlen, ForwardOnCpuWritesTheReference) {
  const std::vector<int32_t> cu_q = {0, 3, 3, 10}, cu_k = {0, 4, 6, 10};
  Tensor q = random_tensor({10, 4, 16}, DType::kBF16, 11);
  Tensor k = random_tensor({10, 2, 16}, DType::kBF16, 12);
  Tensor v = random_tensor({10, 2, 16}, DType::kBF16, 13);
  // lse a transposed view (stride 1 in heads): the layout is the caller's.
  Tensor o = filled({10, 4, 16}, DType::kBF16, 7.0f);
  Tensor lse_t = filled({10, 4}, DType::kF32, 7.0f);
  const TensorView lse(lse_t.data(), DType::kF32, Device::cpu(), {4, 10}, {1, 4});
  for (bool causal : {false, true}) {
    forward_varlen(q, k, v, cu_tensor(cu_q), cu_tensor(cu_k), 7, 4, causal, 0.25f, o, lse,
                   Stream::cpu());
    const VarlenReferenceResult r = reference_attention_varlen(
        q, k, v, cu_tensor(cu_q), cu_tensor(cu_k), 7, 4, causal, 0.25f);
    for (int64_t t = 0; t < 10; ++t)
      for (int64_t h = 0; h < 4; ++h) {
        ASSERT_TRUE(same_bits(lse.data_as<float>()[h + 4 * t], r.lse_at(h, t)))
            << "lse " << h << ", " << t;
        for (int64_t d = 0; d < 16; ++d)
          ASSERT_EQ(at3(o, t, h, d), round_to_dtype(DType::kBF16, r.o_at(t, h, d)))
              << "o " << t << ", " << h << ", " << d;
      }
  }
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  Tensor o_short = filled({9, 4, 16}, DType::kBF16, 0.0f);
  EXPECT_PRED2(has, error_of([&] {
                 forward_varlen(q, k, v, cu_tensor(cu_q), cu_tensor(cu_k), 7, 4, false, 0.25f,
                                o_short, TensorView(), Stream::cpu());
               }),
               "o = bf16[9, 4, 16] cpu: expected the shape of q = bf16[10, 4, 16] cpu");
  Tensor lse_bad = filled({10, 4}, DType::kF32, 0.0f);
  EXPECT_PRED2(has, error_of([&] {
                 forward_varlen(q, k, v, cu_tensor(cu_q), cu_tensor(cu_k), 7, 4, false, 0.25f, o,
                                lse_bad, Stream::cpu());
               }),
               "lse = f32[10, 4] cpu: expected f32[4, 10] [Hq, total_q]");
  Tensor cu_wide = Tensor::empty({4}, DType::kI64, Device::cpu());
  EXPECT_PRED2(has, error_of([&] {
                 forward_varlen(q, k, v, cu_wide, cu_tensor(cu_k), 7, 4, false, 0.25f, o,
                                TensorView(), Stream::cpu());
               }),
               "cu_seqlens_q = i64[4] cpu: expected contiguous i32[B + 1]");
  EXPECT_PRED2(has, error_of([&] {
                 forward_varlen(q, k, v, cu_tensor(cu_q), cu_tensor(cu_k), 6, 4, false, 0.25f, o,
                                TensorView(), Stream::cpu());
               }),
               "cu_seqlens_q[3] - cu_seqlens_q[2] = 7: expected <= max_seqlen_q = 6");
}

}  // namespace
}  // namespace tessera::attn
