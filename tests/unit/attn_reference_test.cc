// The cpu backend of tessera::attn (the float32 reference behind the public API): forward
// against a naive double-precision formula, masks by global positions (contiguous, striped,
// zigzag chunks of one causal sequence), chunked accumulation for 1..16 chunks, several jobs
// in one call, merge, finalize (also written by a state's last accumulate: final_o), strided
// views, GQA/MQA, and argument validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "tessera/attn/attention.h"
#include "tessera/attn/reference.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "unit/attn_test_util.h"

namespace tessera::attn {
namespace {

struct Shape {
  int64_t b, lq, lkv, hq, hkv, d;
};

TEST(AttnReference, ForwardMatchesNaiveFormula) {
  const Stream cpu = Stream::cpu();
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (Shape s : {Shape{1, 1, 1, 1, 1, 4}, Shape{2, 5, 7, 4, 2, 8}, Shape{1, 9, 3, 3, 1, 16},
                    Shape{2, 4, 11, 2, 2, 5}}) {
      for (bool causal : {false, true}) {
        Tensor q = random_tensor({s.b, s.lq, s.hq, s.d}, dtype, seed++);
        Tensor k = random_tensor({s.b, s.lkv, s.hkv, s.d}, dtype, seed++);
        Tensor v = random_tensor({s.b, s.lkv, s.hkv, s.d}, dtype, seed++);
        Tensor o = filled({s.b, s.lq, s.hq, s.d}, DType::kF32, NAN);
        Tensor lse = filled({s.b, s.hq, s.lq}, DType::kF32, NAN);
        MaskSpec mask = causal ? MaskSpec::causal_at(s.lkv - s.lq, 0) : MaskSpec::none();
        float scale = default_softmax_scale(s.d);
        if (dtype == DType::kF32) {
          forward(q, k, v, o, lse, mask, scale, cpu);
        } else {
          Tensor o16 = filled({s.b, s.lq, s.hq, s.d}, dtype, NAN);
          forward(q, k, v, o16, lse, mask, scale, cpu);
          for (int64_t i = 0; i < o.view().numel(); ++i)
            store_from_float(o.data(), DType::kF32, i, load_as_float(o16.data(), dtype, i));
        }
        auto [eo, el] = max_errors(o, lse, naive(q, k, v, mask, scale));
        const double tol_o = dtype == DType::kF32 ? 1e-5 : (dtype == DType::kBF16 ? 8e-3 : 1e-3);
        EXPECT_LE(eo, tol_o) << dtype_name(dtype) << " lq " << s.lq << " lkv " << s.lkv
                             << " causal " << causal;
        EXPECT_LE(el, 1e-5) << dtype_name(dtype) << " lq " << s.lq << " lkv " << s.lkv;
      }
    }
  }
}

TEST(AttnReference, RowsThatSeeNoKeyGiveZeroAndMinusInfinity) {
  const Stream cpu = Stream::cpu();
  Tensor q = random_tensor({1, 4, 2, 8}, DType::kBF16, 7);
  Tensor k = random_tensor({1, 6, 2, 8}, DType::kBF16, 8);
  Tensor v = random_tensor({1, 6, 2, 8}, DType::kBF16, 9);
  Tensor o = filled({1, 4, 2, 8}, DType::kBF16, NAN);
  Tensor lse = filled({1, 2, 4}, DType::kF32, NAN);
  // Queries at positions 10..13, keys at 12..17: rows 0 and 1 see no key.
  forward(q, k, v, o, lse, MaskSpec::causal_at(10, 12), 0.3f, cpu);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 4; ++i) {
      float l = at3(lse.view(), 0, h, i);
      if (i < 2) {
        EXPECT_EQ(l, -kInf);
        for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(at4(o.view(), 0, i, h, d), 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(l));
      }
    }
  }
  // A chunk that no row sees leaves a state untouched; a fully masked forward writes zeros.
  Tensor so = filled({1, 4, 2, 8}, DType::kF32, NAN);
  Tensor sl = filled({1, 2, 4}, DType::kF32, NAN);
  AttnState state{so, sl};
  init_state(state, cpu);
  KvChunk hidden{k, v, MaskSpec::causal_at(0, 100)};
  accumulate(q, std::span<const KvChunk>(&hidden, 1), state, 0.3f, cpu);
  for (int64_t i = 0; i < so.view().numel(); ++i) EXPECT_EQ(so.data_as<float>()[i], 0.0f);
  for (int64_t i = 0; i < sl.view().numel(); ++i) EXPECT_EQ(sl.data_as<float>()[i], -kInf);
}

// Splits a causal sequence of length L among W ranks in three ways and checks that folding
// every rank's KV chunk into each rank's Q chunk reproduces the rows of full causal attention.
TEST(AttnReference, CausalChunksByGlobalPositionsMatchFullSequence) {
  const Stream cpu = Stream::cpu();
  const int64_t L = 24, W = 3, H = 2, D = 8;
  Tensor q = random_tensor({1, L, H, D}, DType::kF32, 21);
  Tensor k = random_tensor({1, L, H, D}, DType::kF32, 22);
  Tensor v = random_tensor({1, L, H, D}, DType::kF32, 23);
  const float scale = 0.4f;
  Naive full = naive(q, k, v, MaskSpec::causal_at(0, 0), scale);

  struct Piece {
    int64_t start, stride, len;
  };
  // Each layout gives every rank a list of pieces (position start, stride, length).
  auto contiguous = [&](int64_t r) { return std::vector<Piece>{{r * (L / W), 1, L / W}}; };
  auto striped = [&](int64_t r) { return std::vector<Piece>{{r, W, L / W}}; };
  auto zigzag = [&](int64_t r) {
    const int64_t c = L / (2 * W);
    return std::vector<Piece>{{r * c, 1, c}, {(2 * W - 1 - r) * c, 1, c}};
  };
  // A view of rows [start + i*stride] of a [1, L, H, D] tensor.
  auto rows = [&](const TensorView& t, const Piece& p) {
    return TensorView(static_cast<float*>(t.data()) + p.start * H * D, DType::kF32, Device::cpu(),
                      {1, p.len, H, D}, {L * H * D, p.stride * H * D, D, 1});
  };
  int layout_idx = 0;
  for (auto layout : {std::function<std::vector<Piece>(int64_t)>(contiguous),
                      std::function<std::vector<Piece>(int64_t)>(striped),
                      std::function<std::vector<Piece>(int64_t)>(zigzag)}) {
    for (int64_t r = 0; r < W; ++r) {
      for (const Piece& qp : layout(r)) {
        std::vector<KvChunk> chunks;
        for (int64_t r2 = 0; r2 < W; ++r2)
          for (const Piece& kp : layout(r2))
            chunks.push_back({rows(k, kp), rows(v, kp),
                              MaskSpec::causal_at(qp.start, kp.start, qp.stride, kp.stride)});
        Tensor so = filled({1, qp.len, H, D}, DType::kF32, NAN);
        Tensor sl = filled({1, H, qp.len}, DType::kF32, NAN);
        AttnState state{so, sl};
        init_state(state, cpu);
        accumulate(rows(q, qp), chunks, state, scale, cpu);
        Tensor out = filled({1, qp.len, H, D}, DType::kF32, NAN);
        finalize(state, out, cpu);
        for (int64_t i = 0; i < qp.len; ++i) {
          const int64_t pos = qp.start + i * qp.stride;
          for (int64_t h = 0; h < H; ++h) {
            EXPECT_NEAR(at3(sl.view(), 0, h, i), full.lse[size_t(h * L + pos)], 1e-5)
                << "layout " << layout_idx << " rank " << r << " pos " << pos;
            for (int64_t d = 0; d < D; ++d)
              EXPECT_NEAR(at4(out.view(), 0, i, h, d), full.o[size_t((pos * H + h) * D + d)], 1e-5);
          }
        }
      }
    }
    ++layout_idx;
  }
}

TEST(AttnReference, AccumulateOneToSixteenChunksEqualsOneCall) {
  const Stream cpu = Stream::cpu();
  const int64_t B = 1, Lq = 6, Lkv = 48, Hq = 4, Hkv = 2, D = 8;
  Tensor q = random_tensor({B, Lq, Hq, D}, DType::kBF16, 31);
  Tensor k = random_tensor({B, Lkv, Hkv, D}, DType::kBF16, 32);
  Tensor v = random_tensor({B, Lkv, Hkv, D}, DType::kBF16, 33);
  const MaskSpec mask = MaskSpec::causal_at(40, 0);
  Tensor o1 = filled({B, Lq, Hq, D}, DType::kF32, NAN);
  Tensor l1 = filled({B, Hq, Lq}, DType::kF32, NAN);
  {  // one call in f32 output: the state's reference
    Tensor so = filled({B, Lq, Hq, D}, DType::kF32, NAN);
    AttnState s{so, l1};
    init_state(s, cpu);
    KvChunk all{k, v, mask};
    accumulate(q, std::span<const KvChunk>(&all, 1), s, 0.35f, cpu);
    finalize(s, o1, cpu);
  }
  for (int n = 1; n <= 16; ++n) {
    std::vector<KvChunk> chunks;
    int64_t start = 0;
    for (int c = 0; c < n; ++c) {
      int64_t len = Lkv * (c + 1) / n - start;
      MaskSpec m = mask;
      m.kv_start = start;
      chunks.push_back({k.view().slice(1, start, len), v.view().slice(1, start, len), m});
      start += len;
    }
    Tensor so = filled({B, Lq, Hq, D}, DType::kF32, NAN);
    Tensor sl = filled({B, Hq, Lq}, DType::kF32, NAN);
    AttnState s{so, sl};
    init_state(s, cpu);
    accumulate(q, chunks, s, 0.35f, cpu);
    Tensor out = filled({B, Lq, Hq, D}, DType::kF32, NAN);
    finalize(s, out, cpu);
    for (int64_t i = 0; i < out.view().numel(); ++i)
      ASSERT_NEAR(out.data_as<float>()[i], o1.data_as<float>()[i], 2e-6) << n << " chunks";
    for (int64_t i = 0; i < sl.view().numel(); ++i)
      ASSERT_NEAR(sl.data_as<float>()[i], l1.data_as<float>()[i], 2e-6) << n << " chunks";
  }
}

TEST(AttnReference, SeveralJobsInOneCallAndMerge) {
  const Stream cpu = Stream::cpu();
  const int64_t H = 2, D = 16;
  Tensor k = random_tensor({1, 20, H, D}, DType::kF16, 41);
  Tensor v = random_tensor({1, 20, H, D}, DType::kF16, 42);
  Tensor qa = random_tensor({1, 3, H, D}, DType::kF16, 43);
  Tensor qb = random_tensor({1, 7, H, D}, DType::kF16, 44);
  KvChunk halves[2] = {{k.view().slice(1, 0, 9), v.view().slice(1, 0, 9), MaskSpec::none()},
                       {k.view().slice(1, 9, 11), v.view().slice(1, 9, 11), MaskSpec::none()}};
  Tensor sao = filled({1, 3, H, D}, DType::kF32, NAN), sal = filled({1, H, 3}, DType::kF32, NAN);
  Tensor sbo = filled({1, 7, H, D}, DType::kF32, NAN), sbl = filled({1, H, 7}, DType::kF32, NAN);
  AttnState sa{sao, sal}, sb{sbo, sbl};
  init_state(sa, cpu);
  // Job b is fresh: its NaN state is never read.
  AccumulateJob jobs[2] = {{qa, sa, halves}, {qb, sb, std::span<const KvChunk>(halves, 1), true}};
  accumulate(jobs, 0.25f, cpu);
  // A fresh job without chunks leaves the empty state (O = 0, lse = -inf).
  Tensor seo = filled({1, 3, H, D}, DType::kF32, NAN), sel = filled({1, H, 3}, DType::kF32, NAN);
  const AccumulateJob empty{qa, AttnState{seo, sel}, {}, true};
  accumulate(std::span<const AccumulateJob>(&empty, 1), 0.25f, cpu);
  for (int64_t i = 0; i < seo.view().numel(); ++i) EXPECT_EQ(seo.data_as<float>()[i], 0.0f);
  for (int64_t i = 0; i < sel.view().numel(); ++i)
    EXPECT_EQ(sel.data_as<float>()[i], -std::numeric_limits<float>::infinity());

  Tensor oa = filled({1, 3, H, D}, DType::kF16, NAN), la = filled({1, H, 3}, DType::kF32, NAN);
  forward(qa, k, v, oa, la, MaskSpec::none(), 0.25f, cpu);
  Tensor ob = filled({1, 7, H, D}, DType::kF16, NAN), lb = filled({1, H, 7}, DType::kF32, NAN);
  forward(qb, halves[0].k, halves[0].v, ob, lb, MaskSpec::none(), 0.25f, cpu);
  for (int64_t i = 0; i < oa.view().numel(); ++i)
    EXPECT_NEAR(sao.data_as<float>()[i], load_as_float(oa.data(), DType::kF16, i), 1e-3);
  for (int64_t i = 0; i < la.view().numel(); ++i)
    EXPECT_NEAR(sal.data_as<float>()[i], la.data_as<float>()[i], 1e-5);
  for (int64_t i = 0; i < ob.view().numel(); ++i)
    EXPECT_NEAR(sbo.data_as<float>()[i], load_as_float(ob.data(), DType::kF16, i), 1e-3);

  // merge: two partials over the halves (fp16 O) give the full result.
  Tensor p0o = filled({1, 3, H, D}, DType::kF16, NAN), p0l = filled({1, H, 3}, DType::kF32, NAN);
  Tensor p1o = filled({1, 3, H, D}, DType::kF16, NAN), p1l = filled({1, H, 3}, DType::kF32, NAN);
  forward(qa, halves[0].k, halves[0].v, p0o, p0l, MaskSpec::none(), 0.25f, cpu);
  forward(qa, halves[1].k, halves[1].v, p1o, p1l, MaskSpec::none(), 0.25f, cpu);
  Partial parts[2] = {{p0o, p0l}, {p1o, p1l}};
  Tensor mo = filled({1, 3, H, D}, DType::kF32, NAN), ml = filled({1, H, 3}, DType::kF32, NAN);
  merge(parts, mo, ml, cpu);
  for (int64_t i = 0; i < mo.view().numel(); ++i)
    EXPECT_NEAR(mo.data_as<float>()[i], load_as_float(oa.data(), DType::kF16, i), 2e-3);
  for (int64_t i = 0; i < ml.view().numel(); ++i)
    EXPECT_NEAR(ml.data_as<float>()[i], la.data_as<float>()[i], 1e-5);
}

// A job with final_o writes what accumulate + finalize write, bit for bit (the cpu backend
// runs exactly that), and leaves the lse correct: fresh and not, GQA, a causal job whose
// chunks no row sees, a job without chunks, next to a job without final_o in the same call.
TEST(AttnReference, FinalOutputEqualsAccumulateThenFinalize) {
  const Stream cpu = Stream::cpu();
  const int64_t B = 2, Lq = 7, Lkv = 9, Hq = 4, Hkv = 2, D = 8;
  uint32_t seed = 300;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (bool fresh : {true, false}) {
      for (int visibility = 0; visibility < 3; ++visibility) {  // all, causal, none / no chunks
        SCOPED_TRACE(str(dtype_name(dtype), fresh ? " fresh" : "", " visibility ", visibility));
        Tensor q = random_tensor({B, Lq, Hq, D}, dtype, seed++);
        Tensor k = random_tensor({B, Lkv, Hkv, D}, dtype, seed++);
        Tensor v = random_tensor({B, Lkv, Hkv, D}, dtype, seed++);
        const MaskSpec mask = visibility == 0   ? MaskSpec::none()
                              : visibility == 1 ? MaskSpec::causal_at(20, 16)
                                                : MaskSpec::causal_at(0, 100);  // no row sees it
        const KvChunk chunk{k, v, mask};
        // Two identical states: one folded and finalized, one folded with final_o. A state
        // that is not fresh holds an earlier fold (with rows that saw nothing: lse = -inf).
        Tensor so[2], sl[2];
        for (int i = 0; i < 2; ++i) {
          so[i] = filled({B, Lq, Hq, D}, DType::kF32, NAN);
          sl[i] = filled({B, Hq, Lq}, DType::kF32, NAN);
          if (!fresh) {
            init_state(AttnState{so[i], sl[i]}, cpu);
            const KvChunk earlier{k.view().slice(1, 0, 4), v.view().slice(1, 0, 4),
                                  MaskSpec::causal_at(0, 3)};
            accumulate(q, std::span<const KvChunk>(&earlier, 1), AttnState{so[i], sl[i]}, 0.3f,
                       cpu);
          }
        }
        const std::span<const KvChunk> kv = visibility == 2 && fresh
                                                ? std::span<const KvChunk>()
                                                : std::span<const KvChunk>(&chunk, 1);
        const AccumulateJob plain{q, AttnState{so[0], sl[0]}, kv, fresh};
        accumulate(std::span<const AccumulateJob>(&plain, 1), 0.3f, cpu);
        Tensor want = filled({B, Lq, Hq, D}, dtype, NAN);
        finalize(AttnState{so[0], sl[0]}, want, cpu);

        // The final output is a head slice of a wider buffer: the rest stays untouched.
        Tensor wide = filled({B, Lq, Hq + 2, D}, dtype, 5.0f);
        const TensorView final_o = wide.view().slice(2, 1, Hq);
        Tensor other_o = filled({B, 3, Hq, D}, DType::kF32, NAN);
        Tensor other_l = filled({B, Hq, 3}, DType::kF32, NAN);
        const AccumulateJob jobs[2] = {
            {q.view().slice(1, 0, 3), AttnState{other_o, other_l}, kv, true},
            {q, AttnState{so[1], sl[1]}, kv, fresh, final_o}};
        accumulate(jobs, 0.3f, cpu);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < Lq; ++i)
            for (int64_t h = 0; h < Hq + 2; ++h)
              for (int64_t d = 0; d < D; ++d) {
                const float got = at4(wide.view(), b, i, h, d);
                if (h == 0 || h == Hq + 1) {
                  ASSERT_EQ(got, 5.0f);
                } else {
                  ASSERT_EQ(got, at4(want.view(), b, i, h - 1, d)) << b << " " << i << " " << h;
                }
              }
        for (int64_t i = 0; i < sl[0].view().numel(); ++i)
          ASSERT_EQ(std::memcmp(sl[0].data_as<float>() + i, sl[1].data_as<float>() + i, 4), 0);
        // The job without final_o next to it folded as usual.
        for (int64_t i = 0; i < other_l.view().numel(); ++i)
          ASSERT_FALSE(std::isnan(other_l.data_as<float>()[i]));
        if (visibility == 2) {  // no row saw a key: zeros where the state had none
          for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hq; ++h)
              for (int64_t i = 0; i < Lq; ++i)
                if (at3(sl[1].view(), b, h, i) == -kInf) {
                  for (int64_t d = 0; d < D; ++d) ASSERT_EQ(at4(final_o, b, i, h, d), 0.0f);
                }
        }
      }
    }
  }
}

TEST(AttnReference, StridedViewsAndGqaMatchDenseCopies) {
  const Stream cpu = Stream::cpu();
  const int64_t B = 2, L = 9, Hq = 6, Hkv = 2, D = 8;
  // Packed qkv [B, L, Hq + 2*Hkv, D]; q, k, v are head slices of it.
  Tensor packed = random_tensor({B, L, Hq + 2 * Hkv, D}, DType::kBF16, 51);
  TensorView q = packed.view().slice(2, 0, Hq);
  TensorView k = packed.view().slice(2, Hq, Hkv);
  TensorView v = packed.view().slice(2, Hq + Hkv, Hkv);
  // o is a head slice of a larger buffer; the rest of the buffer must stay untouched.
  Tensor big = filled({B, L, Hq + 3, D}, DType::kBF16, 7.0f);
  TensorView o = big.view().slice(2, 1, Hq);
  Tensor lse = filled({B, Hq, L}, DType::kF32, NAN);
  forward(q, k, v, o, lse, MaskSpec::causal_at(0, 0), 0.3f, cpu);
  Naive n = naive(q, k, v, MaskSpec::causal_at(0, 0), 0.3f);
  auto [eo, el] = max_errors(o, lse, n);
  EXPECT_LE(eo, 8e-3);
  EXPECT_LE(el, 1e-5);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t h : {int64_t(0), Hq + 1, Hq + 2})
        for (int64_t d = 0; d < D; ++d) EXPECT_EQ(at4(big.view(), b, i, h, d), 7.0f);
  // GQA equals MHA over K/V heads repeated Hq/Hkv times.
  Tensor k_rep = Tensor::empty({B, L, Hq, D}, DType::kBF16, Device::cpu());
  Tensor v_rep = Tensor::empty({B, L, Hq, D}, DType::kBF16, Device::cpu());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < L; ++j)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d) {
          int64_t idx = ((b * L + j) * Hq + h) * D + d;
          store_from_float(k_rep.data(), DType::kBF16, idx, at4(k, b, j, h / 3, d));
          store_from_float(v_rep.data(), DType::kBF16, idx, at4(v, b, j, h / 3, d));
        }
  Tensor o_rep = filled({B, L, Hq, D}, DType::kBF16, NAN);
  Tensor l_rep = filled({B, Hq, L}, DType::kF32, NAN);
  forward(q, k_rep, v_rep, o_rep, l_rep, MaskSpec::causal_at(0, 0), 0.3f, cpu);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d)
          EXPECT_EQ(at4(o, b, i, h, d), at4(o_rep.view(), b, i, h, d));
  // MQA: one KV head.
  Tensor o_mqa = filled({B, L, Hq, D}, DType::kBF16, NAN);
  Tensor l_mqa = filled({B, Hq, L}, DType::kF32, NAN);
  forward(q, packed.view().slice(2, Hq, 1), packed.view().slice(2, Hq + 1, 1), o_mqa, l_mqa,
          MaskSpec::none(), 0.3f, cpu);
  auto [e_mqa, el_mqa] =
      max_errors(o_mqa, l_mqa,
                 naive(q, packed.view().slice(2, Hq, 1), packed.view().slice(2, Hq + 1, 1),
                       MaskSpec::none(), 0.3f));
  EXPECT_LE(e_mqa, 8e-3);
  EXPECT_LE(el_mqa, 1e-5);
}

TEST(AttnReference, ReferenceInInputPrecisionIsCloseButNotExact) {
  Tensor q = random_tensor({1, 16, 2, 64}, DType::kBF16, 61);
  Tensor k = random_tensor({1, 32, 2, 64}, DType::kBF16, 62);
  Tensor v = random_tensor({1, 32, 2, 64}, DType::kBF16, 63);
  KvChunk c{k, v, MaskSpec::none()};
  ReferenceResult f32 = reference_attention(q, std::span<const KvChunk>(&c, 1), 0.125f);
  ReferenceResult low = reference_attention(q, std::span<const KvChunk>(&c, 1), 0.125f,
                                            ReferencePrecision::kInputRounding);
  double err = 0;
  for (size_t i = 0; i < f32.o.size(); ++i)
    err = std::max(err, double(std::abs(f32.o[i] - low.o[i])));
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 2e-2);
}

TEST(AttnReference, VisiblePairs) {
  EXPECT_EQ(visible_pairs(5, 7, MaskSpec::none()), 35);
  EXPECT_EQ(visible_pairs(4, 4, MaskSpec::causal_at(0, 0)), 10);
  EXPECT_EQ(visible_pairs(3, 10, MaskSpec::causal_at(0, 5)), 0);
  // Striped: queries at 1, 4, 7; keys at 0, 3, 6, 9 -> 1 + 2 + 3.
  EXPECT_EQ(visible_pairs(3, 4, MaskSpec::causal_at(1, 0, 3, 3)), 6);
}

void expect_error_naming(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(AttnReference, ValidationNamesTheArgument) {
  const Stream cpu = Stream::cpu();
  Tensor q = random_tensor({1, 4, 4, 8}, DType::kBF16, 71);
  Tensor k = random_tensor({1, 5, 2, 8}, DType::kBF16, 72);
  Tensor v = random_tensor({1, 5, 2, 8}, DType::kBF16, 73);
  Tensor o = filled({1, 4, 4, 8}, DType::kBF16, 0);
  Tensor lse = filled({1, 4, 4}, DType::kF32, 0);
  Tensor k3 = random_tensor({1, 5, 3, 8}, DType::kBF16, 74);
  Tensor k_f16 = random_tensor({1, 5, 2, 8}, DType::kF16, 75);
  Tensor v_short = random_tensor({1, 4, 2, 8}, DType::kBF16, 76);
  Tensor o_f32 = filled({1, 4, 4, 8}, DType::kF32, 0);
  Tensor lse_bad = filled({1, 4, 5}, DType::kF32, 0);
  Tensor flat = random_tensor({4, 32}, DType::kBF16, 77);
  const MaskSpec none = MaskSpec::none();
  expect_error_naming([&] { forward(flat, k, v, o, lse, none, 0.3f, cpu); }, "q = bf16[4, 32]");
  expect_error_naming([&] { forward(q, k3, k3, o, lse, none, 0.3f, cpu); }, "kv[0].k");
  expect_error_naming([&] { forward(q, k_f16, v, o, lse, none, 0.3f, cpu); }, "kv[0].k / kv[0].v");
  expect_error_naming([&] { forward(q, k, v_short, o, lse, none, 0.3f, cpu); }, "kv[0].v");
  expect_error_naming([&] { forward(q, k, v, o_f32, lse, none, 0.3f, cpu); }, "o has dtype f32");
  expect_error_naming([&] { forward(q, k, v, o, lse_bad, none, 0.3f, cpu); }, "lse = f32[1, 4, 5]");
  expect_error_naming([&] { forward(q, k, v, o, lse, none, 0.0f, cpu); }, "softmax_scale");
  expect_error_naming([&] { forward(q, k, v, o, lse, MaskSpec::causal_at(0, 0, 0, 1), 0.3f, cpu); },
                      "mask has q_stride 0");
  TensorView q_strided_d(q.data(), DType::kBF16, Device::cpu(), {1, 4, 2, 8}, {128, 32, 16, 2});
  expect_error_naming([&] { forward(q_strided_d, k, v, o, lse, none, 0.3f, cpu); },
                      "stride 2 in D");
  TensorView q_on_gpu(q.data(), DType::kBF16, Device::cuda(0), {1, 4, 4, 8});
  expect_error_naming([&] { forward(q_on_gpu, k, v, o, lse, none, 0.3f, cpu); }, "is on cuda:0");
  AttnState bad_state{o, lse};  // bf16 O is not a state
  expect_error_naming([&] { init_state(bad_state, cpu); }, "state.o has dtype bf16");
  expect_error_naming(
      [&] {
        KvChunk c{k, v, none};
        accumulate(q, std::span<const KvChunk>(&c, 1), bad_state, 0.3f, cpu);
      },
      "state.o has dtype bf16");
  expect_error_naming([&] { merge({}, o, lse, cpu); }, "partials is empty");
  {
    Tensor so = filled({1, 4, 4, 8}, DType::kF32, 0), sl = filled({1, 4, 4}, DType::kF32, 0);
    Tensor o_short = filled({1, 3, 4, 8}, DType::kBF16, 0);
    const KvChunk c{k, v, none};
    const auto job_with = [&](const TensorView& final_o) {
      return AccumulateJob{q, AttnState{so, sl}, std::span<const KvChunk>(&c, 1), false, final_o};
    };
    const AccumulateJob with_f32 = job_with(o_f32);
    expect_error_naming(
        [&] { accumulate(std::span<const AccumulateJob>(&with_f32, 1), 0.3f, cpu); },
        "final_o has dtype f32: expected bf16");
    const AccumulateJob jobs[2] = {job_with(TensorView()), job_with(o_short)};
    expect_error_naming([&] { accumulate(jobs, 0.3f, cpu); }, "jobs[1].final_o = bf16[1, 3, 4, 8]");
    const AccumulateJob on_gpu = job_with(q_on_gpu);
    expect_error_naming([&] { accumulate(std::span<const AccumulateJob>(&on_gpu, 1), 0.3f, cpu); },
                        "final_o = bf16[1, 4, 4, 8] cuda:0 is on cuda:0");
  }
  Partial p{o, lse_bad};
  expect_error_naming([&] { merge(std::span<const Partial>(&p, 1), o, lse, cpu); },
                      "partials[0].lse");
}

}  // namespace
}  // namespace tessera::attn
