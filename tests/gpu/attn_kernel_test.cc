// GPU tests of tessera::attn's cuda backend against the float32 reference (reference.h) on
// random inputs, with FlashAttention-3's tolerance rule: max |gpu - f32| must stay within
// 2x the error of a reference computed in the input precision, plus the output's rounding.
// Every output is poisoned (NaN) before the call and must be fully written; rows that see no
// key must be exactly O = 0, lse = -inf. Shapes include 1, odd lengths and lengths that are
// not multiples of any tile, separate Q and KV lengths, GQA/MQA, strided views, masks by
// global positions, chunked accumulation over 1..16 (and 40) chunks, several jobs per launch,
// merge and finalize, the final output written by the state's last accumulate, and packed
// sequences of different lengths (varlen), head dims 64, 128 and 256.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tessera/attn/attention.h"
#include "tessera/attn/fp8.h"
#include "tessera/attn/reference.h"
#include "tessera/attn/varlen.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/memory.h"
#include "tessera/runtime/stream.h"

namespace tessera::attn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A tensor with a host copy and a device copy of the same layout.
struct Mirrored {
  Tensor host;
  Tensor device;
  TensorView h(int dim = -1, int64_t start = 0, int64_t len = 0) const {
    return dim < 0 ? host.view() : host.view().slice(dim, start, len);
  }
  TensorView d(int dim = -1, int64_t start = 0, int64_t len = 0) const {
    return dim < 0 ? device.view() : device.view().slice(dim, start, len);
  }
  size_t bytes() const { return size_t(host.view().numel()) * host.view().element_size(); }
};

class AttnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = Stream::create_cuda(0);
  }

  Mirrored random(std::vector<int64_t> shape, DType dtype, uint32_t seed, float lo = -1.0f,
                  float hi = 1.0f) {
    // uniform in [lo, hi)
    Mirrored m{Tensor::empty(shape, dtype, Device::cpu()),
               Tensor::empty(shape, dtype, Device::cuda(0))};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < m.host.view().numel(); ++i)
      store_from_float(m.host.data(), dtype, i, dist(rng));
    upload(m);
    return m;
  }
  Mirrored filled(std::vector<int64_t> shape, DType dtype, float value) {
    Mirrored m{Tensor::empty(shape, dtype, Device::cpu()),
               Tensor::empty(shape, dtype, Device::cuda(0))};
    for (int64_t i = 0; i < m.host.view().numel(); ++i)
      store_from_float(m.host.data(), dtype, i, value);
    upload(m);
    return m;
  }
  // Device buffer filled with 0xFF bytes (NaN in every float dtype); host copy likewise.
  Mirrored poisoned(std::vector<int64_t> shape, DType dtype) {
    Mirrored m{Tensor::empty(shape, dtype, Device::cpu()),
               Tensor::empty(shape, dtype, Device::cuda(0))};
    std::memset(m.host.data(), 0xFF, m.bytes());
    fill_bytes(m.device.data(), 0xFF, m.bytes(), stream_);
    return m;
  }
  Mirrored i32s(const std::vector<int32_t>& values) {
    const int64_t n = int64_t(values.size());
    Mirrored m{Tensor::empty({n}, DType::kI32, Device::cpu()),
               Tensor::empty({n}, DType::kI32, Device::cuda(0))};
    std::memcpy(m.host.data(), values.data(), m.bytes());
    upload(m);
    return m;
  }
  void upload(const Mirrored& m) {
    copy_bytes(m.device.data(), m.host.data(), m.bytes(), stream_);
    stream_.synchronize();
  }
  void download(const Mirrored& m) {
    stream_.synchronize();
    copy_bytes(m.host.data(), m.device.data(), m.bytes(), stream_);
    stream_.synchronize();
  }

  Stream stream_;
};

float at4(const TensorView& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return load_as_float(t.data(), t.dtype(),
                       a * t.stride(0) + b * t.stride(1) + c * t.stride(2) + d * t.stride(3));
}
float at3(const TensorView& t, int64_t a, int64_t b, int64_t c) {
  return load_as_float(t.data(), t.dtype(), a * t.stride(0) + b * t.stride(1) + c * t.stride(2));
}
// FlashAttention-3's rule: tolerance = 2 * error of the input-precision reference + noise.
struct Tolerance {
  double o = 0, lse = 0;
};
Tolerance tolerance_for(const ReferenceResult& f32, const ReferenceResult& low, DType out_dtype) {
  double err_o = 0, noise = 0, err_lse = 0, lse_mag = 0;
  for (size_t i = 0; i < f32.o.size(); ++i) {
    err_o = std::max(err_o, double(std::abs(round_to_dtype(out_dtype, low.o[i]) - f32.o[i])));
    noise = std::max(noise, double(std::abs(round_to_dtype(out_dtype, f32.o[i]) - f32.o[i])));
  }
  for (size_t i = 0; i < f32.lse.size(); ++i) {
    if (std::isinf(f32.lse[i])) continue;
    err_lse = std::max(err_lse, double(std::abs(low.lse[i] - f32.lse[i])));
    lse_mag = std::max(lse_mag, double(std::abs(f32.lse[i])));
  }
  return {2 * err_o + noise + 1e-6, 2 * err_lse + 1e-6 * lse_mag + 1e-5};
}

struct Errors {
  double o = 0, lse = 0;
  int64_t unwritten = 0;       // NaN/inf left in O, NaN in lse
  int64_t bad_empty_rows = 0;  // rows with no key that are not exactly (0, -inf)
};

// Compares o [B, Lq, Hq, D] and lse [B, Hq, Lq] (host views) with the reference.
Errors compare(const TensorView& o, const TensorView& lse, const ReferenceResult& ref) {
  Errors e;
  for (int64_t b = 0; b < ref.batch; ++b)
    for (int64_t i = 0; i < ref.lq; ++i)
      for (int64_t h = 0; h < ref.heads; ++h) {
        const bool empty_row = std::isinf(ref.lse_at(b, h, i));
        for (int64_t d = 0; d < ref.head_dim; ++d) {
          const float x = at4(o, b, i, h, d);
          if (!std::isfinite(x)) {
            ++e.unwritten;
            continue;
          }
          if (empty_row && x != 0.0f) ++e.bad_empty_rows;
          e.o = std::max(e.o, double(std::abs(x - ref.o_at(b, i, h, d))));
        }
        if (lse.empty()) continue;
        const float l = at3(lse, b, h, i);
        if (std::isnan(l)) {
          ++e.unwritten;
        } else if (empty_row) {
          if (l != -kInf) ++e.bad_empty_rows;
        } else if (std::isinf(l)) {
          ++e.unwritten;
        } else {
          e.lse = std::max(e.lse, double(std::abs(l - ref.lse_at(b, h, i))));
        }
      }
  return e;
}

void expect_within(const Errors& e, const Tolerance& t, const std::string& what) {
  EXPECT_EQ(e.unwritten, 0) << what;
  EXPECT_EQ(e.bad_empty_rows, 0) << what;
  EXPECT_LE(e.o, t.o) << what << " (O error vs tolerance)";
  EXPECT_LE(e.lse, t.lse) << what << " (lse error vs tolerance)";
}

struct Case {
  int64_t b, lq, lkv, hq, hkv;
  MaskSpec mask;
};

std::string describe(const Case& c, DType dtype, int64_t d) {
  return str(dtype_name(dtype), " D", d, " B", c.b, " Lq", c.lq, " Lkv", c.lkv, " H", c.hq, ":",
             c.hkv,
             c.mask.causal ? str(" causal q", c.mask.q_start, "+", c.mask.q_stride, "i kv",
                                 c.mask.kv_start, "+", c.mask.kv_stride, "j")
                           : std::string(" full"));
}

TEST_F(AttnGpu, ForwardMatchesReferenceOnOddShapes) {
  uint32_t seed = 100;
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, MaskSpec::none()},
      {2, 1, 333, 4, 2, MaskSpec::none()},
      {1, 77, 200, 3, 1, MaskSpec::none()},
      {1, 300, 513, 2, 2, MaskSpec::none()},
      {2, 257, 129, 4, 4, MaskSpec::none()},
      {1, 128, 128, 2, 1, MaskSpec::none()},
      {1, 1, 1, 2, 2, MaskSpec::causal_at(0, 0)},
      {1, 300, 300, 2, 1, MaskSpec::causal_at(0, 0)},
      {2, 77, 333, 3, 3, MaskSpec::causal_at(333 - 77, 0)},  // bottom-right aligned
      {1, 260, 130, 4, 2, MaskSpec::causal_at(0, 0)},        // rows past the keys
  };
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128, 256}) {
      for (const Case& c : cases) {
        Mirrored q = random({c.b, c.lq, c.hq, d}, dtype, seed++);
        Mirrored k = random({c.b, c.lkv, c.hkv, d}, dtype, seed++);
        Mirrored v = random({c.b, c.lkv, c.hkv, d}, dtype, seed++);
        Mirrored o = poisoned({c.b, c.lq, c.hq, d}, dtype);
        Mirrored lse = poisoned({c.b, c.hq, c.lq}, DType::kF32);
        const float scale = default_softmax_scale(d);
        forward(q.d(), k.d(), v.d(), o.d(), lse.d(), c.mask, scale, stream_);
        download(o);
        download(lse);
        KvChunk chunk{k.h(), v.h(), c.mask};
        ReferenceResult f32 =
            reference_attention(q.h(), std::span<const KvChunk>(&chunk, 1), scale);
        ReferenceResult low = reference_attention(q.h(), std::span<const KvChunk>(&chunk, 1), scale,
                                                  ReferencePrecision::kInputRounding);
        expect_within(compare(o.h(), lse.h(), f32), tolerance_for(f32, low, dtype),
                      describe(c, dtype, d));
        // Run to run: a second call on fresh poison gives bitwise the same o and lse.
        Mirrored o2 = poisoned({c.b, c.lq, c.hq, d}, dtype);
        Mirrored lse2 = poisoned({c.b, c.hq, c.lq}, DType::kF32);
        forward(q.d(), k.d(), v.d(), o2.d(), lse2.d(), c.mask, scale, stream_);
        download(o2);
        download(lse2);
        EXPECT_EQ(std::memcmp(o.host.data(), o2.host.data(), o.bytes()), 0)
            << describe(c, dtype, d) << ": o of a second call";
        EXPECT_EQ(std::memcmp(lse.host.data(), lse2.host.data(), lse.bytes()), 0)
            << describe(c, dtype, d) << ": lse of a second call";
      }
    }
  }
}

TEST_F(AttnGpu, MasksByGlobalPositionsAndRowsWithoutKeys) {
  uint32_t seed = 200;
  const std::vector<Case> cases = {
      {1, 200, 300, 2, 1, MaskSpec::causal_at(50, 100, 2, 3)},  // striped-like strides
      {1, 150, 150, 2, 2, MaskSpec::causal_at(1, 0, 4, 4)},     // striped, rank 1 of 4
      {1, 129, 257, 4, 2, MaskSpec::causal_at(-40, 0)},         // first 40 rows see nothing
      {2, 64, 200, 2, 1, MaskSpec::causal_at(0, 1000)},         // no row sees a key
      {1, 333, 77, 2, 2, MaskSpec::causal_at(500, 450, 1, 1)},  // partially visible chunk
  };
  for (DType dtype : {DType::kBF16}) {
    for (int64_t d : {64, 128, 256}) {
      for (const Case& c : cases) {
        Mirrored q = random({c.b, c.lq, c.hq, d}, dtype, seed++);
        Mirrored k = random({c.b, c.lkv, c.hkv, d}, dtype, seed++);
        Mirrored v = random({c.b, c.lkv, c.hkv, d}, dtype, seed++);
        Mirrored o = poisoned({c.b, c.lq, c.hq, d}, dtype);
        Mirrored lse = poisoned({c.b, c.hq, c.lq}, DType::kF32);
        forward(q.d(), k.d(), v.d(), o.d(), lse.d(), c.mask, 0.1f, stream_);
        download(o);
        download(lse);
        KvChunk chunk{k.h(), v.h(), c.mask};
        ReferenceResult f32 = reference_attention(q.h(), std::span<const KvChunk>(&chunk, 1), 0.1f);
        ReferenceResult low = reference_attention(q.h(), std::span<const KvChunk>(&chunk, 1), 0.1f,
                                                  ReferencePrecision::kInputRounding);
        expect_within(compare(o.h(), lse.h(), f32), tolerance_for(f32, low, dtype),
                      describe(c, dtype, d));
      }
    }
  }
}

TEST_F(AttnGpu, StridedViewsLeaveTheRestOfTheirBuffersAlone) {
  const int64_t B = 2, L = 190, Hq = 6, Hkv = 2, D = 128;
  const DType dtype = DType::kBF16;
  // q, k, v are head slices of one packed [B, L, Hq + 2 Hkv, D] buffer.
  Mirrored packed = random({B, L, Hq + 2 * Hkv, D}, dtype, 301);
  // o is heads [1, 1 + Hq) of a [B, L, Hq + 2, D] buffer, lse heads [1, 1 + Hq) and rows
  // [3, 3 + L) of a [B, Hq + 2, L + 5] buffer; both pre-filled with a marker.
  Mirrored big_o = filled({B, L, Hq + 2, D}, dtype, 7.0f);
  Mirrored big_lse = filled({B, Hq + 2, L + 5}, DType::kF32, 9.0f);
  auto o_view = [&](const TensorView& t) { return t.slice(2, 1, Hq); };
  auto lse_view = [&](const TensorView& t) { return t.slice(1, 1, Hq).slice(2, 3, L); };
  // Poison the output windows on the device.
  {
    Tensor nan_o = Tensor::empty({B, L, Hq + 2, D}, dtype, Device::cpu());
    std::memcpy(nan_o.data(), big_o.host.data(), big_o.bytes());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t h = 1; h <= Hq; ++h)
          for (int64_t d = 0; d < D; ++d)
            store_from_float(nan_o.data(), dtype, ((b * L + i) * (Hq + 2) + h) * D + d, NAN);
    copy_bytes(big_o.device.data(), nan_o.data(), big_o.bytes(), stream_);
  }
  const MaskSpec mask = MaskSpec::causal_at(0, 0);
  forward(packed.d(2, 0, Hq), packed.d(2, Hq, Hkv), packed.d(2, Hq + Hkv, Hkv), o_view(big_o.d()),
          lse_view(big_lse.d()), mask, 0.09f, stream_);
  Mirrored before_o{Tensor::empty({B, L, Hq + 2, D}, dtype, Device::cpu()), big_o.device};
  Mirrored before_lse{Tensor::empty({B, Hq + 2, L + 5}, DType::kF32, Device::cpu()),
                      big_lse.device};
  download(before_o);
  download(before_lse);
  KvChunk chunk{packed.h(2, Hq, Hkv), packed.h(2, Hq + Hkv, Hkv), mask};
  ReferenceResult f32 =
      reference_attention(packed.h(2, 0, Hq), std::span<const KvChunk>(&chunk, 1), 0.09f);
  ReferenceResult low = reference_attention(packed.h(2, 0, Hq), std::span<const KvChunk>(&chunk, 1),
                                            0.09f, ReferencePrecision::kInputRounding);
  expect_within(compare(o_view(before_o.h()), lse_view(before_lse.h()), f32),
                tolerance_for(f32, low, dtype), "strided views");
  int64_t touched = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t h : {int64_t(0), Hq + 1})
        for (int64_t d = 0; d < D; ++d) touched += at4(before_o.h(), b, i, h, d) != 7.0f;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq + 2; ++h)
      for (int64_t i = 0; i < L + 5; ++i) {
        const bool inside = h >= 1 && h <= Hq && i >= 3 && i < 3 + L;
        if (!inside) touched += at3(before_lse.h(), b, h, i) != 9.0f;
      }
  EXPECT_EQ(touched, 0) << "elements outside the output views were written";
}

// Splits [0, Lkv) into n uneven chunks (none a multiple of a tile) with their own masks.
std::vector<KvChunk> split_chunks(const TensorView& k, const TensorView& v, int n,
                                  const MaskSpec& mask) {
  std::vector<KvChunk> chunks;
  const int64_t lkv = k.size(1);
  int64_t start = 0;
  for (int c = 0; c < n; ++c) {
    int64_t end = c + 1 == n ? lkv : lkv * (c + 1) / n + (c % 3) - 1;
    end = std::max(start, std::min(end, lkv));
    MaskSpec m = mask;
    m.kv_start = mask.kv_start + start * mask.kv_stride;
    chunks.push_back({k.slice(1, start, end - start), v.slice(1, start, end - start), m});
    start = end;
  }
  return chunks;
}

TEST_F(AttnGpu, ChunkedAccumulationEqualsOneCallForOneToSixteenChunks) {
  const int64_t B = 1, Lq = 200, Lkv = 1000, Hq = 4, Hkv = 2, D = 128;
  const DType dtype = DType::kBF16;
  Mirrored q = random({B, Lq, Hq, D}, dtype, 401);
  Mirrored k = random({B, Lkv, Hkv, D}, dtype, 402);
  Mirrored v = random({B, Lkv, Hkv, D}, dtype, 403);
  const float scale = default_softmax_scale(D);
  for (const MaskSpec& mask : {MaskSpec::none(), MaskSpec::causal_at(800, 0)}) {
    KvChunk all{k.h(), v.h(), mask};
    ReferenceResult f32 = reference_attention(q.h(), std::span<const KvChunk>(&all, 1), scale);
    ReferenceResult low = reference_attention(q.h(), std::span<const KvChunk>(&all, 1), scale,
                                              ReferencePrecision::kInputRounding);
    const Tolerance tol = tolerance_for(f32, low, dtype);
    // The one-call result.
    Mirrored o1 = poisoned({B, Lq, Hq, D}, dtype);
    Mirrored l1 = poisoned({B, Hq, Lq}, DType::kF32);
    forward(q.d(), k.d(), v.d(), o1.d(), l1.d(), mask, scale, stream_);
    download(o1);
    download(l1);
    expect_within(compare(o1.h(), l1.h(), f32), tol, "one call");
    for (int n : {1, 2, 3, 4, 5, 7, 8, 11, 16, 40}) {
      std::vector<KvChunk> dev_chunks = split_chunks(k.d(), v.d(), n, mask);
      Mirrored so = poisoned({B, Lq, Hq, D}, DType::kF32);
      Mirrored sl = poisoned({B, Hq, Lq}, DType::kF32);
      AttnState state{so.d(), sl.d()};
      init_state(state, stream_);
      accumulate(q.d(), dev_chunks, state, scale, stream_);
      Mirrored out = poisoned({B, Lq, Hq, D}, dtype);
      finalize(state, out.d(), stream_);
      download(out);
      download(sl);
      download(so);
      const std::string what = str(n, " chunks", mask.causal ? " causal" : "");
      expect_within(compare(out.h(), sl.h(), f32), tol, what + " finalized");
      expect_within(compare(so.h(), sl.h(), f32), tol, what + " state");
      // And against the one-call kernel result, within the same tolerance.
      double diff = 0;
      for (int64_t i = 0; i < out.host.view().numel(); ++i)
        diff = std::max(diff, double(std::abs(load_as_float(out.host.data(), dtype, i) -
                                              load_as_float(o1.host.data(), dtype, i))));
      EXPECT_LE(diff, tol.o) << what << " vs one call";
    }
  }
}

TEST_F(AttnGpu, SeveralJobsFoldInOneLaunchAndAcrossLaunches) {
  const int64_t B = 2, Hq = 4, Hkv = 1, D = 64;
  const DType dtype = DType::kF16;
  Mirrored k = random({B, 700, Hkv, D}, dtype, 501);
  Mirrored v = random({B, 700, Hkv, D}, dtype, 502);
  const int64_t lqs[3] = {1, 130, 333};
  std::vector<Mirrored> qs, sos, sls;
  for (int j = 0; j < 3; ++j) {
    qs.push_back(random({B, lqs[j], Hq, D}, dtype, 510 + j));
    sos.push_back(poisoned({B, lqs[j], Hq, D}, DType::kF32));
    sls.push_back(poisoned({B, Hq, lqs[j]}, DType::kF32));
  }
  // Job j: its Q chunk sits at positions 300*j ..; KV chunks [0,250), [250,500), [500,700).
  std::vector<std::vector<KvChunk>> dev_kv(3), host_kv(3);
  for (int j = 0; j < 3; ++j) {
    for (auto [s, e] : {std::pair<int64_t, int64_t>{0, 250}, {250, 500}, {500, 700}}) {
      if (j == 1 && s == 250) continue;  // job 1 skips the middle chunk
      MaskSpec m = MaskSpec::causal_at(300 * j, s);
      dev_kv[size_t(j)].push_back({k.d(1, s, e - s), v.d(1, s, e - s), m});
      host_kv[size_t(j)].push_back({k.h(1, s, e - s), v.h(1, s, e - s), m});
    }
  }
  std::vector<AccumulateJob> jobs;
  for (int j = 0; j < 3; ++j) {
    AttnState st{sos[size_t(j)].d(), sls[size_t(j)].d()};
    // Job 0 is fresh: its poisoned (NaN) state is never read, so no init_state.
    if (j == 0) {
      jobs.push_back({qs[0].d(), st, dev_kv[0], true});
      continue;
    }
    init_state(st, stream_);
    // Job 2 folds its first chunk in a separate, earlier launch.
    std::span<const KvChunk> kv(dev_kv[size_t(j)]);
    if (j == 2) {
      accumulate(qs[2].d(), kv.subspan(0, 1), st, 0.125f, stream_);
      kv = kv.subspan(1);
    }
    jobs.push_back({qs[size_t(j)].d(), st, kv});
  }
  accumulate(jobs, 0.125f, stream_);
  for (int j = 0; j < 3; ++j) {
    download(sos[size_t(j)]);
    download(sls[size_t(j)]);
    ReferenceResult f32 = reference_attention(qs[size_t(j)].h(), host_kv[size_t(j)], 0.125f);
    ReferenceResult low = reference_attention(qs[size_t(j)].h(), host_kv[size_t(j)], 0.125f,
                                              ReferencePrecision::kInputRounding);
    expect_within(compare(sos[size_t(j)].h(), sls[size_t(j)].h(), f32),
                  tolerance_for(f32, low, dtype), str("job ", j));
  }
}

TEST_F(AttnGpu, MergeAndFinalizeMatchTheWholeResult) {
  const int64_t B = 1, Lq = 150, Lkv = 600, H = 3, D = 128;
  const DType dtype = DType::kBF16;
  Mirrored q = random({B, Lq, H, D}, dtype, 601);
  Mirrored k = random({B, Lkv, H, D}, dtype, 602);
  Mirrored v = random({B, Lkv, H, D}, dtype, 603);
  const MaskSpec mask = MaskSpec::causal_at(300, 0);  // the last partial hides rows < 150
  std::vector<Mirrored> po, pl;
  std::vector<Partial> parts;
  for (int p = 0; p < 4; ++p) {
    po.push_back(poisoned({B, Lq, H, D}, dtype));
    pl.push_back(poisoned({B, H, Lq}, DType::kF32));
    MaskSpec m = mask;
    m.kv_start = 150 * p;
    forward(q.d(), k.d(1, 150 * p, 150), v.d(1, 150 * p, 150), po.back().d(), pl.back().d(), m,
            0.1f, stream_);
    parts.push_back({po.back().d(), pl.back().d()});
  }
  Mirrored mo = poisoned({B, Lq, H, D}, DType::kF32);
  Mirrored ml = poisoned({B, H, Lq}, DType::kF32);
  merge(parts, mo.d(), ml.d(), stream_);
  Mirrored fo = poisoned({B, Lq, H, D}, dtype);
  finalize(AttnState{mo.d(), ml.d()}, fo.d(), stream_);
  download(mo);
  download(ml);
  download(fo);
  KvChunk all{k.h(), v.h(), mask};
  ReferenceResult f32 = reference_attention(q.h(), std::span<const KvChunk>(&all, 1), 0.1f);
  ReferenceResult low = reference_attention(q.h(), std::span<const KvChunk>(&all, 1), 0.1f,
                                            ReferencePrecision::kInputRounding);
  // Partials are rounded to bf16 before the merge: allow that rounding on top (4 partials).
  Tolerance tol = tolerance_for(f32, low, dtype);
  tol.o *= 1.5;
  expect_within(compare(mo.h(), ml.h(), f32), tol, "merge");
  expect_within(compare(fo.h(), ml.h(), f32), tol, "finalize");
}

// A job with final_o writes what accumulate + finalize write: the same products O * (1 / l),
// rounded to nearest, so the values are equal (up to the sign of a zero) and the lse bits are
// the same. Cases: fresh and not (a state with rows that saw nothing), GQA, a causal chunk
// whose first query tile sees no key (the kernel's no-visible-block path: fresh writes zeros,
// not fresh converts the state), a job without chunks, a job of 40 chunks (two launches, the
// final output from the second), a job without final_o in the same launch, and a final output
// that is a head slice of a wider buffer whose other heads stay untouched.
TEST_F(AttnGpu, FinalOutputEqualsAccumulateThenFinalize) {
  const int64_t B = 2, Lq = 300, Lkv = 700, Hq = 4, Hkv = 2;
  uint32_t seed = 900;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t D : {64, 128, 256}) {
      Mirrored q = random({B, Lq, Hq, D}, dtype, seed++);
      Mirrored k = random({B, Lkv, Hkv, D}, dtype, seed++);
      Mirrored v = random({B, Lkv, Hkv, D}, dtype, seed++);
      const float scale = default_softmax_scale(D);
      for (bool fresh : {true, false}) {
        // kind 0: one full chunk; 1: causal, query rows [0, 150) see no key (the first tile
        // sees none); 2: no chunk at all; 3: 40 causal chunks.
        for (int kind = 0; kind < 4; ++kind) {
          const std::string what =
              str(dtype_name(dtype), " D", D, fresh ? " fresh" : "", " kind ", kind);
          std::vector<KvChunk> kv;
          if (kind == 0) kv.push_back({k.d(), v.d(), MaskSpec::none()});
          if (kind == 1) kv.push_back({k.d(), v.d(), MaskSpec::causal_at(0, 150)});
          if (kind == 3) kv = split_chunks(k.d(), v.d(), 40, MaskSpec::causal_at(400, 0));
          // Identical starting states for both paths; a state that is not fresh holds an
          // earlier fold in which rows [0, 100) saw nothing (lse = -inf).
          Mirrored so[2] = {poisoned({B, Lq, Hq, D}, DType::kF32),
                            poisoned({B, Lq, Hq, D}, DType::kF32)};
          Mirrored sl[2] = {poisoned({B, Hq, Lq}, DType::kF32), poisoned({B, Hq, Lq}, DType::kF32)};
          for (int i = 0; i < 2 && !fresh; ++i) {
            const AttnState st{so[i].d(), sl[i].d()};
            init_state(st, stream_);
            const KvChunk earlier{k.d(1, 0, 90), v.d(1, 0, 90), MaskSpec::causal_at(0, 100)};
            accumulate(q.d(), std::span<const KvChunk>(&earlier, 1), st, scale, stream_);
          }
          // A second job in the same launch, without final_o: rows [0, 77) folding kv[0..].
          Mirrored other_o[2] = {poisoned({B, 77, Hq, D}, DType::kF32),
                                 poisoned({B, 77, Hq, D}, DType::kF32)};
          Mirrored other_l[2] = {poisoned({B, Hq, 77}, DType::kF32),
                                 poisoned({B, Hq, 77}, DType::kF32)};
          const std::span<const KvChunk> other_kv(kv.data(), std::min<size_t>(kv.size(), 1));

          // Path 0: accumulate, then finalize.
          const AccumulateJob plain[2] = {
              {q.d(), AttnState{so[0].d(), sl[0].d()}, kv, fresh},
              {q.d(1, 0, 77), AttnState{other_o[0].d(), other_l[0].d()}, other_kv, true}};
          accumulate(plain, scale, stream_);
          Mirrored want = poisoned({B, Lq, Hq, D}, dtype);
          finalize(AttnState{so[0].d(), sl[0].d()}, want.d(), stream_);

          // Path 1: the final output from the accumulate, into heads [1, 1 + Hq) of a wider
          // buffer.
          Mirrored wide = filled({B, Lq, Hq + 2, D}, dtype, 7.0f);
          {  // poison the window
            Tensor nan_wide = Tensor::empty({B, Lq, Hq + 2, D}, dtype, Device::cpu());
            std::memcpy(nan_wide.data(), wide.host.data(), wide.bytes());
            for (int64_t b = 0; b < B; ++b)
              for (int64_t i = 0; i < Lq; ++i)
                for (int64_t h = 1; h <= Hq; ++h)
                  for (int64_t d = 0; d < D; ++d)
                    store_from_float(nan_wide.data(), dtype, ((b * Lq + i) * (Hq + 2) + h) * D + d,
                                     NAN);
            copy_bytes(wide.device.data(), nan_wide.data(), wide.bytes(), stream_);
          }
          const AccumulateJob folded[2] = {
              {q.d(), AttnState{so[1].d(), sl[1].d()}, kv, fresh, wide.d(2, 1, Hq)},
              {q.d(1, 0, 77), AttnState{other_o[1].d(), other_l[1].d()}, other_kv, true}};
          accumulate(folded, scale, stream_);

          download(want);
          download(wide);
          download(sl[0]);
          download(sl[1]);
          download(other_o[0]);
          download(other_o[1]);
          int64_t mismatched = 0, unwritten = 0, touched = 0;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t i = 0; i < Lq; ++i)
              for (int64_t h = 0; h < Hq + 2; ++h)
                for (int64_t d = 0; d < D; ++d) {
                  const float got = at4(wide.h(), b, i, h, d);
                  if (h == 0 || h == Hq + 1) {
                    touched += got != 7.0f;
                  } else if (std::isnan(got)) {
                    ++unwritten;
                  } else {
                    mismatched += got != at4(want.h(), b, i, h - 1, d);
                  }
                }
          EXPECT_EQ(unwritten, 0) << what;
          EXPECT_EQ(mismatched, 0) << what;
          EXPECT_EQ(touched, 0) << what << ": heads outside the final output were written";
          EXPECT_EQ(std::memcmp(sl[0].host.data(), sl[1].host.data(), sl[0].bytes()), 0)
              << what << ": lse";
          EXPECT_EQ(std::memcmp(other_o[0].host.data(), other_o[1].host.data(), other_o[0].bytes()),
                    0)
              << what << ": the job without final_o";
          if (kind == 1 && fresh) {  // rows [0, 150) saw nothing: exactly zero
            for (int64_t i = 0; i < 150; ++i)
              for (int64_t d = 0; d < D; ++d) EXPECT_EQ(at4(wide.h(), 1, i, 2, d), 0.0f) << what;
          }
        }
      }
    }
  }
}

TEST_F(AttnGpu, LongerSequenceSampledRows) {
  // One realistic tile count (16 x 16 blocks per head) checked on sampled rows.
  const int64_t B = 1, L = 2048, H = 2, D = 128;
  const DType dtype = DType::kBF16;
  Mirrored q = random({B, L, H, D}, dtype, 701);
  Mirrored k = random({B, L, H, D}, dtype, 702);
  Mirrored v = random({B, L, H, D}, dtype, 703);
  for (const MaskSpec& mask : {MaskSpec::none(), MaskSpec::causal_at(0, 0)}) {
    Mirrored o = poisoned({B, L, H, D}, dtype);
    Mirrored lse = poisoned({B, H, L}, DType::kF32);
    forward(q.d(), k.d(), v.d(), o.d(), lse.d(), mask, default_softmax_scale(D), stream_);
    download(o);
    download(lse);
    for (int64_t row : {int64_t(0), int64_t(1), int64_t(127), int64_t(128), int64_t(1000), L - 1}) {
      MaskSpec m = mask;
      m.q_start = mask.q_pos(row);
      KvChunk all{k.h(), v.h(), m};
      ReferenceResult f32 = reference_attention(q.h(1, row, 1), std::span<const KvChunk>(&all, 1),
                                                default_softmax_scale(D));
      ReferenceResult low =
          reference_attention(q.h(1, row, 1), std::span<const KvChunk>(&all, 1),
                              default_softmax_scale(D), ReferencePrecision::kInputRounding);
      expect_within(compare(o.h(1, row, 1), lse.h(2, row, 1), f32), tolerance_for(f32, low, dtype),
                    str("row ", row, mask.causal ? " causal" : ""));
    }
  }
}

// Varlen: sequences of different lengths (an empty one, one shorter than a tile, one longer
// than two tiles, queries fewer than keys) packed in one call, against the float32 reference of
// each sequence with the usual rule, and bitwise against each sequence run alone by forward()
// (the same tiles, masks and order: the keys of the next sequence that a tile loads past its
// own end are masked like the zeros past a tensor's end). bf16 and fp16, D 64, 128 and 256,
// causal (bottom-right) and not, GQA 2:1; then a second call bitwise like the first.
TEST_F(AttnGpu, VarlenMatchesReferenceAndEachSequenceAlone) {
  const std::vector<int32_t> lens_q = {130, 0, 1, 77, 300, 64};
  const std::vector<int32_t> lens_k = {130, 5, 40, 77, 300, 200};
  const int64_t hq = 4, hkv = 2, batch = int64_t(lens_q.size());
  std::vector<int32_t> cu_q(1, 0), cu_k(1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    cu_q.push_back(cu_q.back() + lens_q[size_t(b)]);
    cu_k.push_back(cu_k.back() + lens_k[size_t(b)]);
  }
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();
  const Mirrored cuq = i32s(cu_q), cuk = i32s(cu_k);
  uint32_t seed = 1200;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128, 256}) {
      Mirrored q = random({total_q, hq, d}, dtype, seed++);
      Mirrored k = random({total_k, hkv, d}, dtype, seed++);
      Mirrored v = random({total_k, hkv, d}, dtype, seed++);
      const float scale = default_softmax_scale(d);
      for (bool causal : {false, true}) {
        const std::string what = str(dtype_name(dtype), " D", d, causal ? " causal" : "");
        auto call = [&] {  // o and lse on the host, from poisoned buffers
          std::pair<Mirrored, Mirrored> out{poisoned({total_q, hq, d}, dtype),
                                            poisoned({hq, total_q}, DType::kF32)};
          forward_varlen(q.d(), k.d(), v.d(), cuq.d(), cuk.d(), 300, 300, causal, scale,
                         out.first.d(), out.second.d(), stream_);
          download(out.first);
          download(out.second);
          return out;
        };
        const auto [o, lse] = call();
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t q0 = cu_q[size_t(b)], lq = lens_q[size_t(b)];
          const int64_t k0 = cu_k[size_t(b)], lk = lens_k[size_t(b)];
          if (lq == 0) continue;
          const MaskSpec mask = causal ? MaskSpec::causal_at(lk - lq, 0) : MaskSpec::none();
          // o rows and lse columns of this sequence, as [1, lq, Hq, D] and [1, Hq, lq].
          const TensorView o_b = packed_rows(o.h(), q0, lq);
          const TensorView l = lse.h().slice(1, q0, lq);
          const TensorView lse_b(l.data(), DType::kF32, l.device(), {1, hq, lq},
                                 {hq * total_q, l.stride(0), l.stride(1)});
          const KvChunk chunk{packed_rows(k.h(), k0, lk), packed_rows(v.h(), k0, lk), mask};
          const ReferenceResult f32 = reference_attention(
              packed_rows(q.h(), q0, lq), std::span<const KvChunk>(&chunk, 1), scale);
          const ReferenceResult low =
              reference_attention(packed_rows(q.h(), q0, lq), std::span<const KvChunk>(&chunk, 1),
                                  scale, ReferencePrecision::kInputRounding);
          expect_within(compare(o_b, lse_b, f32), tolerance_for(f32, low, dtype),
                        str(what, " sequence ", b));
          // The same sequence alone.
          Mirrored o1 = poisoned({1, lq, hq, d}, dtype);
          Mirrored l1 = poisoned({1, hq, lq}, DType::kF32);
          forward(packed_rows(q.d(), q0, lq), packed_rows(k.d(), k0, lk),
                  packed_rows(v.d(), k0, lk), o1.d(), l1.d(), mask, scale, stream_);
          download(o1);
          download(l1);
          EXPECT_EQ(std::memcmp(o_b.data(), o1.host.data(), o1.bytes()), 0)
              << what << " sequence " << b << ": o differs from the sequence run alone";
          for (int64_t h = 0; h < hq; ++h)
            for (int64_t i = 0; i < lq; ++i) {
              const float a = at3(lse_b, 0, h, i), e = at3(l1.h(), 0, h, i);
              ASSERT_TRUE(a == e || (std::isnan(a) && std::isnan(e)))
                  << what << " sequence " << b << " lse[" << h << ", " << i << "] " << a << " vs "
                  << e << " alone";
            }
        }
        const auto [o2, lse2] = call();
        EXPECT_EQ(std::memcmp(o.host.data(), o2.host.data(), o.bytes()), 0) << what << ": second call";
        EXPECT_EQ(std::memcmp(lse.host.data(), lse2.host.data(), lse.bytes()), 0)
            << what << ": second call's lse";
      }
    }
  }
}

// Varlen with a max_seqlen_q below the longest sequence: the rows past it come out NaN (loud),
// every other row as with the right bound; a sequence past the packed tensors' end is clamped
// to them (nothing written outside o).
TEST_F(AttnGpu, VarlenRowsPastMaxSeqlenAreNaN) {
  const int64_t h = 2, d = 128, total = 300;
  Mirrored q = random({total, h, d}, DType::kBF16, 1300);
  const Mirrored cu = i32s({0, 100, 300});
  Mirrored right = poisoned({total, h, d}, DType::kBF16);
  Mirrored short_bound = poisoned({total, h, d}, DType::kBF16);
  forward_varlen(q.d(), q.d(), q.d(), cu.d(), cu.d(), 200, 200, false, 0.1f, right.d(),
                 TensorView(), stream_);
  forward_varlen(q.d(), q.d(), q.d(), cu.d(), cu.d(), 128, 200, false, 0.1f, short_bound.d(),
                 TensorView(), stream_);
  download(right);
  download(short_bound);
  // cu_seqlens past the packed tensors' end (400 of 300 rows): clamped, o's buffer past its
  // view untouched.
  const Mirrored cu_beyond = i32s({0, 100, 400});
  Mirrored big = poisoned({total + 100, h, d}, DType::kBF16);
  forward_varlen(q.d(), q.d(), q.d(), cu_beyond.d(), cu_beyond.d(), 300, 300, false, 0.1f,
                 big.d(0, 0, total), TensorView(), stream_);
  download(big);
  const auto* bytes = static_cast<const unsigned char*>(big.host.data());
  for (size_t i = size_t(total * h * d) * 2; i < big.bytes(); ++i)
    ASSERT_EQ(bytes[i], 0xFF) << "byte " << i << " past o's view was written";
  EXPECT_EQ(std::memcmp(big.host.data(), right.host.data(), size_t(total * h * d) * 2), 0)
      << "the clamped call's rows differ from the right one's";
  for (int64_t row = 0; row < total; ++row) {
    // The kernel's tiles are 128 rows; sequence 1 (rows 100..300) reaches row 100 + 128.
    const bool reached = row < 100 + 128;
    for (int64_t j = 0; j < h * d; j += 37) {
      const float a = load_as_float(short_bound.host.data(), DType::kBF16, row * h * d + j);
      const float e = load_as_float(right.host.data(), DType::kBF16, row * h * d + j);
      ASSERT_TRUE(std::isfinite(e)) << "row " << row;
      if (reached) {
        ASSERT_EQ(a, e) << "row " << row;
      } else {
        ASSERT_TRUE(std::isnan(a)) << "row " << row << " past max_seqlen_q: " << a;
      }
    }
  }
}

// fn() throws an Error of `code` whose message contains `needle`.
void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(AttnGpu, CudaLimitsAreReportedNamingTheArgument) {
  Mirrored q = random({1, 8, 2, 128}, DType::kBF16, 801);
  Mirrored o = poisoned({1, 8, 2, 128}, DType::kBF16);
  Mirrored lse = poisoned({1, 2, 8}, DType::kF32);
  Mirrored q96 = random({1, 8, 2, 96}, DType::kBF16, 802);
  Mirrored o96 = poisoned({1, 8, 2, 96}, DType::kBF16);
  Mirrored q32 = random({1, 8, 2, 64}, DType::kF32, 803);
  Mirrored o32 = poisoned({1, 8, 2, 64}, DType::kF32);
  // Row stride 132 elements = 264 bytes: not a multiple of 16.
  Mirrored wide = random({1, 8, 1, 132}, DType::kBF16, 804);
  TensorView k_odd(wide.device.data(), DType::kBF16, Device::cuda(0), {1, 8, 1, 128},
                   {8 * 132, 132, 132, 1});
  const MaskSpec none = MaskSpec::none();
  expect_error(
      [&] { forward(q96.d(), q96.d(), q96.d(), o96.d(), TensorView(), none, 0.1f, stream_); },
      ErrorCode::kUnsupported, "head dim 96");
  expect_error(
      [&] { forward(q32.d(), q32.d(), q32.d(), o32.d(), TensorView(), none, 0.1f, stream_); },
      ErrorCode::kUnsupported, "q has dtype f32");
  expect_error([&] { forward(q.d(), k_odd, k_odd, o.d(), lse.d(), none, 0.1f, stream_); },
              ErrorCode::kUnsupported, "kv[0].k");
  expect_error([&] { forward(q.h(), q.d(), q.d(), o.d(), lse.d(), none, 0.1f, stream_); },
              ErrorCode::kInvalidArgument, "q = bf16[1, 8, 2, 128] cpu is on cpu");
  // final_o: q's dtype and the kernel's layout rules.
  Mirrored so = poisoned({1, 8, 2, 128}, DType::kF32);
  Mirrored o_f16 = poisoned({1, 8, 2, 128}, DType::kF16);
  Mirrored o_wide = poisoned({1, 8, 2, 132}, DType::kBF16);
  const TensorView o_odd(o_wide.device.data(), DType::kBF16, Device::cuda(0), {1, 8, 2, 128},
                         {8 * 2 * 132, 2 * 132, 132, 1});
  const KvChunk chunk{q.d(), q.d(), none};
  const AccumulateJob f16_job{q.d(), AttnState{so.d(), lse.d()},
                              std::span<const KvChunk>(&chunk, 1), true, o_f16.d()};
  expect_error([&] { accumulate(std::span<const AccumulateJob>(&f16_job, 1), 0.1f, stream_); },
              ErrorCode::kInvalidArgument, "final_o has dtype f16: expected bf16");
  const AccumulateJob odd_job{q.d(), AttnState{so.d(), lse.d()},
                              std::span<const KvChunk>(&chunk, 1), true, o_odd};
  expect_error([&] { accumulate(std::span<const AccumulateJob>(&odd_job, 1), 0.1f, stream_); },
              ErrorCode::kUnsupported, "final_o");
  EXPECT_FALSE(final_output_supported(o_odd, stream_));
  EXPECT_TRUE(final_output_supported(o.d(), stream_));
}

// FP8: bf16 inputs with heads of very different magnitudes, quantized per head on the host,
// through forward_fp8 on the GPU, against reference_attention_fp8 (the same fp8 inputs
// dequantized, float32). The kernel rounds P to e4m3 (relative step 2^-4) before the PV product,
// so O may differ from the reference by about that much of |V|; a wrong key order in V's
// transposed copy, a wrong descale or a lost block would cost O(|V|). lse comes from unrounded
// probabilities but from scores the FP8 tensor cores accumulate with fewer mantissa bits than
// float32 (about 14, DeepSeek-V3's report, 3.3.2): 5e-4 relative seen, 2e-3 allowed. Odd
// lengths (V's copy padded past its end), several KV blocks, GQA 2:1, causal bottom-right, B 2;
// D 128 and 256; a key 64 times the others' size in the sixth block (rows' maxima jump far past
// the running ones there, so O and the row sums are rescaled by tiny factors); then a second
// call bitwise like the first.
TEST_F(AttnGpu, Fp8ForwardMatchesTheFp8Reference) {
  struct Fp8Case {
    int64_t b, lq, lkv, hq, hkv;
    bool causal;
    int64_t d;
    int64_t outlier_key = -1;
  };
  for (const Fp8Case& c :
       {Fp8Case{2, 200, 333, 4, 2, false, 128}, Fp8Case{1, 130, 1000, 2, 2, true, 128},
        Fp8Case{1, 1, 1, 1, 1, false, 128}, Fp8Case{2, 257, 129, 2, 1, true, 128},
        Fp8Case{1, 190, 300, 2, 1, false, 256}, Fp8Case{1, 300, 300, 2, 2, true, 256},
        Fp8Case{1, 150, 900, 2, 1, false, 128, 700}}) {
    const int64_t D = c.d;
    const std::string what = str("D", D, " B", c.b, " Lq", c.lq, " Lkv", c.lkv, " H", c.hq, ":",
                                 c.hkv, c.causal ? " causal" : "",
                                 c.outlier_key >= 0 ? str(" outlier key ", c.outlier_key) : "");
    // bf16 inputs, head h scaled by 4^h (per-head scales matter), then quantized per head; the
    // keys' outlier row (if any) 64 times larger.
    auto quantized = [&](int64_t len, int64_t heads, uint32_t seed, std::vector<float>& descales,
                         int64_t outlier_row = -1) {
      Mirrored x = random({c.b, len, heads, D}, DType::kBF16, seed);
      for (int64_t i = 0; i < x.host.view().numel(); ++i) {
        const int64_t h = (i / D) % heads, row = (i / (D * heads)) % len;
        const float outlier = row == outlier_row ? 64.0f : 1.0f;
        store_from_float(
            x.host.data(), DType::kBF16, i,
            load_as_float(x.host.data(), DType::kBF16, i) * float(1 << (2 * h)) * outlier);
      }
      descales = fp8_head_descales(x.h());
      Mirrored x8{Tensor::empty({c.b, len, heads, D}, DType::kFP8E4M3, Device::cpu()),
                  Tensor::empty({c.b, len, heads, D}, DType::kFP8E4M3, Device::cuda(0))};
      quantize_fp8_per_head(x.h(), descales, x8.h());
      upload(x8);
      return x8;
    };
    auto on_device = [&](const std::vector<float>& values) {
      Mirrored m{Tensor::empty({int64_t(values.size())}, DType::kF32, Device::cpu()),
                 Tensor::empty({int64_t(values.size())}, DType::kF32, Device::cuda(0))};
      std::memcpy(m.host.data(), values.data(), m.bytes());
      upload(m);
      return m;
    };
    std::vector<float> dq, dk, dv;
    Mirrored q8 = quantized(c.lq, c.hq, 901, dq),
             k8 = quantized(c.lkv, c.hkv, 902, dk, c.outlier_key),
             v8 = quantized(c.lkv, c.hkv, 903, dv);
    Mirrored dq_t = on_device(dq), dk_t = on_device(dk), dv_t = on_device(dv);
    const MaskSpec mask = c.causal ? MaskSpec::causal_at(c.lkv - c.lq, 0) : MaskSpec::none();
    const float scale = default_softmax_scale(D);
    Mirrored o = poisoned({c.b, c.lq, c.hq, D}, DType::kBF16);
    Mirrored lse = poisoned({c.b, c.hq, c.lq}, DType::kF32);
    Tensor workspace =
        Tensor::empty({fp8_workspace_bytes(v8.d(), stream_)}, DType::kU8, Device::cuda(0));
    fill_bytes(workspace.data(), 0xFF, size_t(workspace.view().numel()), stream_);  // NaN in e4m3
    const Fp8DescaleTensors descales{dq_t.d(), dk_t.d(), dv_t.d()};
    forward_fp8(q8.d(), k8.d(), v8.d(), descales, mask, scale, o.d(), lse.d(), workspace, stream_);
    download(o);
    download(lse);
    Mirrored ref_o = poisoned({c.b, c.lq, c.hq, D}, DType::kF32);
    Mirrored ref_lse = poisoned({c.b, c.hq, c.lq}, DType::kF32);
    reference_attention_fp8(q8.h(), k8.h(), v8.h(), Fp8Descales{dq, dk, dv}, mask, scale,
                            ref_o.h(), ref_lse.h());
    for (int64_t h = 0; h < c.hq; ++h) {
      const float v_max = dv[size_t(h / (c.hq / c.hkv))] * kFP8E4M3Max;  // |V| of this head
      double max_err = 0, sum_err = 0, lse_err = 0;
      int64_t n = 0, unwritten = 0;
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t i = 0; i < c.lq; ++i) {
          for (int64_t d = 0; d < D; ++d) {
            const float got = at4(o.h(), b, i, h, d);
            if (!std::isfinite(got)) ++unwritten;
            const double err = std::abs(double(got) - at4(ref_o.h(), b, i, h, d));
            max_err = std::max(max_err, err);
            sum_err += err;
            ++n;
          }
          const float ref_l = at3(ref_lse.h(), b, h, i), got_l = at3(lse.h(), b, h, i);
          if (std::isinf(ref_l)) {
            EXPECT_EQ(got_l, ref_l) << what << " head " << h << " row " << i;
          } else {
            lse_err = std::max(lse_err, double(std::abs(got_l - ref_l)) / (1 + std::abs(ref_l)));
          }
        }
      EXPECT_EQ(unwritten, 0) << what << " head " << h;
      EXPECT_LE(max_err, v_max / 16) << what << " head " << h << " (max |O error| vs |V| 2^-4)";
      EXPECT_LE(sum_err / double(n), v_max / 256) << what << " head " << h << " (mean |O error|)";
      EXPECT_LE(lse_err, 2e-3) << what << " head " << h << " (lse relative error)";
    }
    Mirrored again = poisoned({c.b, c.lq, c.hq, D}, DType::kBF16);
    forward_fp8(q8.d(), k8.d(), v8.d(), descales, mask, scale, again.d(), TensorView(), workspace,
                stream_);
    download(again);
    EXPECT_EQ(std::memcmp(again.host.data(), o.host.data(), o.bytes()), 0)
        << what << ": a second call differs";
  }
}

TEST_F(AttnGpu, Fp8LimitsAreReportedNamingTheArgument) {
  auto fp8 = [](std::vector<int64_t> shape) {
    return Tensor::empty(shape, DType::kFP8E4M3, Device::cuda(0));
  };
  Tensor x = fp8({1, 8, 2, 128}), x64 = fp8({1, 8, 2, 64});
  Tensor o = Tensor::empty({1, 8, 2, 128}, DType::kBF16, Device::cuda(0));
  Tensor o64 = Tensor::empty({1, 8, 2, 64}, DType::kBF16, Device::cuda(0));
  Tensor o_f16 = Tensor::empty({1, 8, 2, 128}, DType::kF16, Device::cuda(0));
  Tensor ones = Tensor::empty({2}, DType::kF32, Device::cuda(0));
  Tensor one = Tensor::empty({1}, DType::kF32, Device::cuda(0));
  Tensor small = Tensor::empty({64}, DType::kU8, Device::cuda(0));
  Tensor ws = Tensor::empty({fp8_workspace_bytes(x.view(), stream_)}, DType::kU8, Device::cuda(0));
  const Fp8DescaleTensors d{ones, ones, ones};
  const MaskSpec none = MaskSpec::none();
  expect_error([&] { forward_fp8(x64, x64, x64, d, none, 0.1f, o64, {}, ws, stream_); },
               ErrorCode::kUnsupported, "head dim 64");
  expect_error([&] { forward_fp8(x, x, x, d, none, 0.1f, o_f16, {}, ws, stream_); },
               ErrorCode::kUnsupported, "o has dtype f16");
  expect_error([&] { forward_fp8(x, x, x, d, none, 0.1f, o, {}, small, stream_); },
               ErrorCode::kInvalidArgument, "workspace");
  expect_error([&] { forward_fp8(x, x, x, {one, ones, ones}, none, 0.1f, o, {}, ws, stream_); },
               ErrorCode::kInvalidArgument, "descales.q");
  expect_error([&] { forward_fp8(o, x, x, d, none, 0.1f, o, {}, ws, stream_); },
               ErrorCode::kInvalidArgument, "q has dtype bf16: expected fp8_e4m3");
}

}  // namespace
}  // namespace tessera::attn
