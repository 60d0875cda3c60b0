// GPU tests of the layer-operation kernels (kernels/ops/) against the float32 cpu reference on
// the same inputs, f32/bf16/f16, at sizes 1, odd, past one CTA's 256 threads and not multiples
// of any vector width, and widths the 16-byte paths take (multiples of 8: 1000, 1024, 4096, the
// norms' narrow rows from 32 and largest 8192, and 8200 past it); strided and in-place views.
// Outputs are poisoned (NaN bytes) first and must be fully written; float outputs may differ from
// the reference by one rounding of the dtype (the float32 sums run in another order), indices and
// copies must match exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/model/ops.h"
#include "tessera/runtime/memory.h"
#include "tessera/runtime/stream.h"

namespace tessera::model {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

struct Pair {  // host and device copies of one tensor
  Tensor host, device;
};

class ModelOpsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = Stream::create_cuda(0);
  }
  static size_t bytes(const Tensor& t) {
    return size_t(t.view().numel()) * t.view().element_size();
  }
  Pair make(const std::vector<int64_t>& shape, DType dtype, uint32_t seed, float lo = -2.0f,
            float hi = 2.0f) {
    Pair p{Tensor::empty(shape, dtype, Device::cpu()),
           Tensor::empty(shape, dtype, Device::cuda(0))};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < p.host.view().numel(); ++i)
      store_from_float(p.host.data(), dtype, i, dist(rng));
    copy_bytes(p.device.data(), p.host.data(), bytes(p.host), stream_);
    return p;
  }
  // An output pair, both copies filled with 0xff bytes (NaN in every float dtype).
  Pair poisoned(const std::vector<int64_t>& shape, DType dtype) {
    Pair p{Tensor::empty(shape, dtype, Device::cpu()),
           Tensor::empty(shape, dtype, Device::cuda(0))};
    fill_bytes(p.host.data(), 0xff, bytes(p.host), Stream::cpu());
    fill_bytes(p.device.data(), 0xff, bytes(p.device), stream_);
    return p;
  }
  Tensor download(const Tensor& device) {
    Tensor host = Tensor::empty(shape_of(device), device.view().dtype(), Device::cpu());
    copy_bytes(host.data(), device.data(), bytes(device), stream_);
    stream_.synchronize();
    return host;
  }
  static std::vector<int64_t> shape_of(const Tensor& t) {
    std::vector<int64_t> s;
    for (int d = 0; d < t.view().ndim(); ++d) s.push_back(t.view().size(d));
    return s;
  }
  // Every element of the kernel's output is written and within one rounding of the reference.
  void expect_close(const Pair& out, const char* what, double slack = 1e-5) {
    const Tensor got = download(out.device);
    const DType dtype = out.host.view().dtype();
    const double ulp = dtype == DType::kBF16 ? 1.0 / 128 : dtype == DType::kF16 ? 1.0 / 1024 : 1e-6;
    for (int64_t i = 0; i < got.view().numel(); ++i) {
      const double want = load_as_float(out.host.data(), dtype, i);
      const double have = load_as_float(got.data(), dtype, i);
      ASSERT_FALSE(std::isnan(have)) << what << " element " << i << " not written";
      ASSERT_NEAR(have, want, ulp * std::max(1.0, std::fabs(want)) + slack)
          << what << " element " << i << " (" << dtype_name(dtype) << ")";
    }
  }

  Stream stream_;
};

TEST_F(ModelOpsGpu, NormsWithFusedResidualMatchTheReference) {
  for (DType dtype : kFloatTypes)
    for (int64_t rows : {1, 3, 37})
      // Each lanes-per-row path of the 16-byte kernel (32 to 1000 several rows a CTA, 1920 up a
      // CTA a row) and the generic one.
      for (int64_t c : {1, 7, 32, 64, 128, 256, 512, 1000, 1920, 4096, 4099, 8192, 8200}) {
        Pair x = make({rows, c}, dtype, 1), res = make({rows, c}, dtype, 2);
        Pair w = make({c}, dtype, 3, 0.5f, 1.5f), b = make({c}, dtype, 4);
        for (int op = 0; op < 3; ++op) {  // RMSNorm, LayerNorm affine, LayerNorm plain
          Pair out = poisoned({rows, c}, dtype), res_out = poisoned({rows, c}, dtype);
          auto run = [&](bool device) {
            auto pick = [&](const Pair& p) -> TensorView { return device ? p.device : p.host; };
            const Stream& s = device ? stream_ : Stream::cpu();
            const Residual r{pick(res), pick(res_out)};
            if (op == 0) rms_norm(pick(x), r, pick(w), 1e-5f, pick(out), s);
            if (op == 1) layer_norm(pick(x), r, pick(w), pick(b), 1e-5f, pick(out), s);
            if (op == 2) layer_norm(pick(x), r, {}, {}, 1e-6f, pick(out), s);
          };
          run(false);
          run(true);
          expect_close(res_out, "residual.out", 0);
          expect_close(out, op == 0 ? "rms_norm" : "layer_norm", 1e-4);
        }
      }
}

TEST_F(ModelOpsGpu, RopeMatchesTheReferenceOnPackedQkvInPlaceAndOutOfPlace) {
  RopeScaling llama3;
  llama3.llama3 = true;
  llama3.factor = 8;
  for (DType dtype : kFloatTypes)
    for (int64_t dim : {64, 128, 6})
      for (DType pos_dtype : {DType::kI32, DType::kI64}) {
        const int64_t tokens = 37, heads = 3, rotary = dim == 6 ? 4 : dim;
        Pair qkv = make({tokens, 3 * heads, dim}, dtype, 5);
        Pair positions{Tensor::empty({tokens}, pos_dtype, Device::cpu()),
                       Tensor::empty({tokens}, pos_dtype, Device::cuda(0))};
        for (int64_t t = 0; t < tokens; ++t)
          store_from_float(positions.host.data(), pos_dtype, t, float(t * 3541 % 131072));
        copy_bytes(positions.device.data(), positions.host.data(),
                   size_t(tokens) * dtype_size(pos_dtype), stream_);
        const std::vector<float> freq = rope_inv_freq(rotary, 500000.0, llama3);
        Pair inv_freq{Tensor::empty({rotary / 2}, DType::kF32, Device::cpu()),
                      Tensor::empty({rotary / 2}, DType::kF32, Device::cuda(0))};
        std::copy(freq.begin(), freq.end(), inv_freq.host.data_as<float>());
        copy_bytes(inv_freq.device.data(), freq.data(), freq.size() * 4, stream_);
        // k (heads [H, 2H) of the packed row) out of place into a poisoned tensor, q in place.
        Pair k_out = poisoned({tokens, heads, dim}, dtype);
        rope(qkv.host.view().slice(1, heads, heads), positions.host, inv_freq.host, k_out.host,
             Stream::cpu());
        rope(qkv.device.view().slice(1, heads, heads), positions.device, inv_freq.device,
             k_out.device, stream_);
        expect_close(k_out, "rope k");
        const TensorView q_host = qkv.host.view().slice(1, 0, heads);
        const TensorView q_device = qkv.device.view().slice(1, 0, heads);
        rope(q_host, positions.host, inv_freq.host, q_host, Stream::cpu());
        rope(q_device, positions.device, inv_freq.device, q_device, stream_);
        expect_close(qkv, "rope q in place (and k, v untouched)");
      }
}

TEST_F(ModelOpsGpu, PointwiseOpsMatchTheReference) {
  for (DType dtype : kFloatTypes)
    for (int64_t rows : {1, 5})
      for (int64_t c : {1, 33, 1024, 4099}) {
        Pair gate_up = make({rows, 2 * c}, dtype, 6, -8.0f, 8.0f);
        Pair out = poisoned({rows, c}, dtype);
        silu_and_mul(gate_up.host.view().slice(1, 0, c), gate_up.host.view().slice(1, c, c),
                     out.host, Stream::cpu());
        silu_and_mul(gate_up.device.view().slice(1, 0, c), gate_up.device.view().slice(1, c, c),
                     out.device, stream_);
        expect_close(out, "silu_and_mul");

        Pair x = make({rows, c}, dtype, 7, -8.0f, 8.0f);
        gelu_tanh(x.host, x.host, Stream::cpu());
        gelu_tanh(x.device, x.device, stream_);
        expect_close(x, "gelu_tanh in place");

        const int64_t batch = 2;
        Pair tokens = make({batch, rows, c}, dtype, 8);
        Pair mod = make({batch, 6 * c}, dtype, 9);  // shift, scale = chunks 3, 4 of 6
        Pair modulated = poisoned({batch, rows, c}, dtype);
        adaln_modulate(tokens.host, mod.host.view().slice(1, 3 * c, c),
                       mod.host.view().slice(1, 4 * c, c), modulated.host, Stream::cpu());
        adaln_modulate(tokens.device, mod.device.view().slice(1, 3 * c, c),
                       mod.device.view().slice(1, 4 * c, c), modulated.device, stream_);
        expect_close(modulated, "adaln_modulate");

        Pair residual = make({batch, rows, c}, dtype, 10);
        Pair update = make({batch, rows, c}, dtype, 11);
        gated_add(residual.host, update.host, mod.host.view().slice(1, 2 * c, c), residual.host,
                  Stream::cpu());
        gated_add(residual.device, update.device, mod.device.view().slice(1, 2 * c, c),
                  residual.device, stream_);
        expect_close(residual, "gated_add in place");

        Pair act = make({rows, c}, dtype, 12, -8.0f, 8.0f);
        Pair act_out = poisoned({rows, c}, dtype);
        silu(act.host, act_out.host, Stream::cpu());
        silu(act.device, act_out.device, stream_);
        expect_close(act_out, "silu");
      }
}

// Flux's q/k norm and rotation on q and k inside a packed [T, 3C] qkv (strided views), in place,
// with the RoPE tables and without; head dims 64 and 128 (Flux's) and 6 (fewer pairs than lanes).
TEST_F(ModelOpsGpu, HeadRmsNormRotaryMatchesTheReferenceOnPackedQkv) {
  for (DType dtype : kFloatTypes)
    for (int64_t d : {6, 64, 128})
      for (bool tables : {true, false}) {
        const int64_t tokens = 37, heads = 3, c = heads * d;
        Pair qkv = make({tokens, 3 * c}, dtype, 13, -3.0f, 3.0f);
        Pair weight = make({d}, dtype, 14, 0.5f, 1.5f);
        Pair cos = make({tokens, d}, DType::kF32, 15, -1.0f, 1.0f);
        Pair sin = make({tokens, d}, DType::kF32, 16, -1.0f, 1.0f);
        for (int64_t column : {int64_t(0), c}) {  // q, then k
          auto heads_of = [&](const Tensor& t) {
            auto* data = static_cast<std::byte*>(t.data()) + size_t(column) * dtype_size(dtype);
            return TensorView(data, dtype, t.view().device(), {tokens, heads, d}, {3 * c, d, 1});
          };
          const TensorView h = heads_of(qkv.host), g = heads_of(qkv.device);
          head_rms_norm_rotary(h, weight.host, 1e-6f, tables ? cos.host.view() : TensorView(),
                               tables ? sin.host.view() : TensorView(), h, Stream::cpu());
          head_rms_norm_rotary(g, weight.device, 1e-6f, tables ? cos.device.view() : TensorView(),
                               tables ? sin.device.view() : TensorView(), g, stream_);
        }
        SCOPED_TRACE(::testing::Message()
                     << "D " << d << (tables ? " with" : " without") << " tables");
        expect_close(qkv, "head_rms_norm_rotary (v untouched)", 1e-4);
      }
}

TEST_F(ModelOpsGpu, EmbeddingAndArgmaxMatchExactly) {
  for (DType dtype : kFloatTypes)
    for (DType index_dtype : {DType::kI32, DType::kI64}) {
      const int64_t vocab = 32003, tokens = 37, c = 257;
      Pair table = make({vocab, c}, dtype, 10);
      Pair ids{Tensor::empty({tokens}, index_dtype, Device::cpu()),
               Tensor::empty({tokens}, index_dtype, Device::cuda(0))};
      for (int64_t t = 0; t < tokens; ++t)
        store_from_float(ids.host.data(), index_dtype, t, float((t * 7919) % vocab));
      store_from_float(ids.host.data(), index_dtype, 0, float(vocab - 1));
      copy_bytes(ids.device.data(), ids.host.data(), size_t(tokens) * dtype_size(index_dtype),
                 stream_);
      Pair rows = poisoned({tokens, c}, dtype);
      embedding(ids.host, table.host, rows.host, Stream::cpu());
      embedding(ids.device, table.device, rows.device, stream_);
      const Tensor got_rows = download(rows.device);
      EXPECT_EQ(std::memcmp(got_rows.data(), rows.host.data(), bytes(got_rows)), 0);

      // Logits with a planted maximum per row, a tie and a NaN row.
      Pair logits = make({tokens, vocab}, dtype, 11, -10.0f, 10.0f);
      for (int64_t t = 0; t < tokens; ++t)
        store_from_float(logits.host.data(), dtype, t * vocab + (t * 104729) % vocab, 50.0f);
      store_from_float(logits.host.data(), dtype, 1 * vocab + 3, 50.0f);
      store_from_float(logits.host.data(), dtype, 1 * vocab + 30000, 50.0f);
      store_from_float(logits.host.data(), dtype, 2 * vocab + 999, NAN);
      copy_bytes(logits.device.data(), logits.host.data(), bytes(logits.host), stream_);
      Pair best = poisoned({tokens}, index_dtype);
      argmax(logits.host, best.host, Stream::cpu());
      argmax(logits.device, best.device, stream_);
      const Tensor got_best = download(best.device);
      EXPECT_EQ(std::memcmp(got_best.data(), best.host.data(), bytes(got_best)), 0);
      EXPECT_EQ(load_as_float(got_best.data(), index_dtype, 1), 3.0f);    // the lower of the tie
      EXPECT_EQ(load_as_float(got_best.data(), index_dtype, 2), 999.0f);  // NaN wins
    }
}

}  // namespace
}  // namespace tessera::model
