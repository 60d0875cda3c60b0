// Determinism of the cpu references: the same inputs give bitwise identical outputs from run
// to run for the attention reference (float32 and input-rounding precision), the cpu
// attention API the sequence-parallel executor calls (forward, accumulate + finalize, merge),
// and the decode attention block (the float64 reference, kUnfused, and the float32 emulation
// of the fused split, kFused), outputs and appended caches alike. Each output buffer is
// filled with different garbage before each run, so a value left unwritten shows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/attn/attention.h"
#include "tessera/attn/reference.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"
#include "tessera/runtime/stream.h"

namespace tessera {
namespace {

Tensor random_tensor(const std::vector<int64_t>& shape, DType dtype, uint32_t seed, float lo = -1,
                     float hi = 1) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.view().numel(); ++i) store_from_float(t.data(), dtype, i, dist(rng));
  return t;
}

std::vector<std::byte> bytes_of(const TensorView& t) {
  const auto* p = static_cast<const std::byte*>(t.data());
  return std::vector<std::byte>(p, p + t.span_bytes());
}

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  return std::vector<std::byte>(p, p + v.size() * sizeof(T));
}

void expect_bitwise_equal(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << what << ": runs differ";
}

// B 2, Lq 13, Lkv 29 (two chunks of 17 and 12), Hq 6, Hkv 2, D 24, causal at offsets.
struct AttnInputs {
  DType dtype;
  Tensor q, k0, v0, k1, v1;
  attn::KvChunk chunks[2];

  explicit AttnInputs(DType dt)
      : dtype(dt),
        q(random_tensor({2, 13, 6, 24}, dt, 1)),
        k0(random_tensor({2, 17, 2, 24}, dt, 2)),
        v0(random_tensor({2, 17, 2, 24}, dt, 3)),
        k1(random_tensor({2, 12, 2, 24}, dt, 4)),
        v1(random_tensor({2, 12, 2, 24}, dt, 5)),
        chunks{{k0, v0, attn::MaskSpec::causal_at(20, 0)},
               {k1, v1, attn::MaskSpec::causal_at(20, 17)}} {}
};

TEST(ReferenceDeterminism, AttentionReferenceInBothPrecisions) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const AttnInputs in(dt);
    for (auto precision :
         {attn::ReferencePrecision::kFloat32, attn::ReferencePrecision::kInputRounding}) {
      const std::string what =
          str(dtype_name(dt),
              precision == attn::ReferencePrecision::kFloat32 ? " float32" : " input rounding");
      const attn::ReferenceResult a = attn::reference_attention(in.q, in.chunks, 0.3f, precision);
      const attn::ReferenceResult b = attn::reference_attention(in.q, in.chunks, 0.3f, precision);
      expect_bitwise_equal(bytes_of(a.o), bytes_of(b.o), what + " o");
      expect_bitwise_equal(bytes_of(a.lse), bytes_of(b.lse), what + " lse");
    }
  }
}

// What one sequence-parallel rank computes: forward over both chunks, the same folded one
// chunk at a time (accumulate + finalize), and a merge of two per-chunk partials.
std::vector<std::byte> attention_api_outputs(const AttnInputs& in, uint32_t garbage) {
  const Stream s = Stream::cpu();
  const float scale = attn::default_softmax_scale(24);
  std::vector<std::byte> all;
  auto keep = [&](const TensorView& t) {
    const std::vector<std::byte> b = bytes_of(t);
    all.insert(all.end(), b.begin(), b.end());
  };
  Tensor o = random_tensor({2, 13, 6, 24}, in.dtype, garbage);
  Tensor lse = random_tensor({2, 6, 13}, DType::kF32, garbage + 1);
  attn::forward(in.q, in.chunks, o, lse, scale, s);
  keep(o);
  keep(lse);

  Tensor state_o = random_tensor({2, 13, 6, 24}, DType::kF32, garbage + 2);
  Tensor state_lse = random_tensor({2, 6, 13}, DType::kF32, garbage + 3);
  const attn::AttnState state{state_o, state_lse};
  attn::init_state(state, s);
  for (const attn::KvChunk& c : in.chunks) attn::accumulate(in.q, {&c, 1}, state, scale, s);
  Tensor folded = random_tensor({2, 13, 6, 24}, in.dtype, garbage + 4);
  attn::finalize(state, folded, s);
  keep(state_o);
  keep(state_lse);
  keep(folded);

  std::vector<Tensor> part_o, part_lse;
  std::vector<attn::Partial> partials;
  for (int c = 0; c < 2; ++c) {
    part_o.push_back(random_tensor({2, 13, 6, 24}, in.dtype, garbage + 5 + c));
    part_lse.push_back(random_tensor({2, 6, 13}, DType::kF32, garbage + 7 + c));
    attn::forward(in.q, {&in.chunks[c], 1}, part_o.back(), part_lse.back(), scale, s);
  }
  for (int c = 0; c < 2; ++c) partials.push_back({part_o[size_t(c)], part_lse[size_t(c)]});
  Tensor merged = random_tensor({2, 13, 6, 24}, in.dtype, garbage + 9);
  Tensor merged_lse = random_tensor({2, 6, 13}, DType::kF32, garbage + 10);
  attn::merge(partials, merged, merged_lse, s);
  keep(merged);
  keep(merged_lse);
  return all;
}

TEST(ReferenceDeterminism, CpuAttentionForwardAccumulateMerge) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const AttnInputs in(dt);
    expect_bitwise_equal(attention_api_outputs(in, 100), attention_api_outputs(in, 200),
                         dtype_name(dt));
  }
}

// A GQA model small enough for the cpu: 8 query heads of 64 over 2 KV heads, hidden 512.
decode::ModelConfig small_gqa() {
  decode::ModelConfig m;
  m.name = "small-gqa";
  m.hidden = 512;
  m.num_heads = 8;
  m.num_kv_heads = 2;
  m.head_dim = 64;
  m.rope_theta = 10000.0f;
  return m;
}

// One decode step on fresh copies of the same inputs: out and both caches after the append.
std::vector<std::byte> decode_step_outputs(decode::DecodeImpl impl, DType dt, bool paged,
                                           uint32_t garbage) {
  const decode::ModelConfig m = small_gqa();
  constexpr int64_t kBatch = 3, kContext = 64, kPage = 16;
  const float w = 1.0f / 16;
  const Tensor wq = random_tensor({m.num_heads * m.head_dim, m.hidden}, dt, 11, -w, w);
  const Tensor wk = random_tensor({m.num_kv_heads * m.head_dim, m.hidden}, dt, 12, -w, w);
  const Tensor wv = random_tensor({m.num_kv_heads * m.head_dim, m.hidden}, dt, 13, -w, w);
  const Tensor wo = random_tensor({m.hidden, m.num_heads * m.head_dim}, dt, 14, -w, w);
  const Tensor norm = random_tensor({m.hidden}, dt, 15, 0.5f, 1.5f);
  const Tensor x = random_tensor({kBatch, m.hidden}, dt, 16);
  Tensor positions = Tensor::empty({kBatch}, DType::kI32, Device::cpu());
  const int32_t pos[kBatch] = {0, 17, int32_t(kContext - 1)};
  std::memcpy(positions.data(), pos, sizeof pos);
  const int64_t pages = kBatch * kContext / kPage;
  const std::vector<int64_t> cache_shape =
      paged ? std::vector<int64_t>{pages, kPage, m.num_kv_heads, m.head_dim}
            : std::vector<int64_t>{kBatch, kContext, m.num_kv_heads, m.head_dim};
  const Tensor k = random_tensor(cache_shape, dt, 17), v = random_tensor(cache_shape, dt, 18);
  Tensor table;
  if (paged) {  // sequence b's pages in reverse order
    table = Tensor::empty({kBatch, kContext / kPage}, DType::kI32, Device::cpu());
    for (int64_t i = 0; i < pages; ++i) table.data_as<int32_t>()[i] = int32_t(pages - 1 - i);
  }
  Tensor out = random_tensor({kBatch, m.hidden}, dt, garbage);

  decode::AttentionBlockOptions options;
  options.model = m;
  options.max_batch = kBatch;
  options.max_context = kContext;
  options.dtype = dt;
  options.paged = paged;
  options.page_size = kPage;
  options.impl = impl;
  options.cluster_size = 4;
  const decode::AttentionBlock block(options);
  block.run({x, positions, out}, decode::AttentionWeights{wq, wk, wv, wo, norm},
            {k, v, paged ? TensorView(table) : TensorView{}}, {}, Stream::cpu());
  std::vector<std::byte> all = bytes_of(out.view());
  for (const Tensor* t : {&k, &v}) {
    const std::vector<std::byte> b = bytes_of(t->view());
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

TEST(ReferenceDeterminism, DecodeReferenceAndSplitEmulation) {
  for (decode::DecodeImpl impl : {decode::DecodeImpl::kUnfused, decode::DecodeImpl::kFused}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (bool paged : {false, true}) {
        const std::string what =
            str(impl == decode::DecodeImpl::kFused ? "fused split emulation" : "float64 reference",
                " ", dtype_name(dt), paged ? " paged" : " contiguous");
        expect_bitwise_equal(decode_step_outputs(impl, dt, paged, 300),
                             decode_step_outputs(impl, dt, paged, 400), what);
      }
    }
  }
}

}  // namespace
}  // namespace tessera
