// The decode attention block on the cpu backend: the fused kernel's split dataflow emulated in
// float32 (split_emulation.h, what AttentionBlock runs as kFused on the cpu) against the
// float64 reference (reference.h, kUnfused) for the three model shapes the kernel serves,
// batches 1, 3 and 16, contiguous and shuffled paged caches, ragged positions (0 included),
// and cluster sizes 1 to 16; in float32 (tight: only the summation order differs) and bf16
// (the kernel's roundings). Then the bad input each entry refuses, by the argument's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "decode/reference.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"
#include "tessera/runtime/stream.h"

namespace tessera::decode {
namespace {

constexpr int64_t kMaxContext = 160;
constexpr int64_t kPageSize = 16;

Tensor random_tensor(std::vector<int64_t> shape, DType dt, uint32_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(shape, dt, Device::cpu());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.view().numel(); ++i) store_from_float(t.data(), dt, i, dist(rng));
  return t;
}

Tensor copy_of(const Tensor& t) {
  std::vector<int64_t> shape;
  for (int i = 0; i < t.view().ndim(); ++i) shape.push_back(t.view().size(i));
  Tensor c = Tensor::empty(shape, t.view().dtype(), Device::cpu());
  std::copy_n(static_cast<const char*>(t.data()), t.view().span_bytes(), static_cast<char*>(c.data()));
  return c;
}

struct Weights {
  Tensor wq, wk, wv, wo, norm;
  AttentionWeights view(bool with_norm) const {
    return {wq, wk, wv, wo, with_norm ? TensorView(norm) : TensorView{}};
  }
};

Weights make_weights(const ModelConfig& m, DType dt) {
  const float s = 1.0f / std::sqrt(float(m.hidden));
  const int64_t q = m.num_heads * m.head_dim, kv = m.num_kv_heads * m.head_dim;
  return {random_tensor({q, m.hidden}, dt, 11, -s, s), random_tensor({kv, m.hidden}, dt, 12, -s, s),
          random_tensor({kv, m.hidden}, dt, 13, -s, s), random_tensor({m.hidden, q}, dt, 14, -s, s),
          random_tensor({m.hidden}, dt, 15, 0.5f, 1.5f)};
}

// The full-size weights are large: made once per (model, dtype).
const Weights& weights_for(const ModelConfig& m, DType dt) {
  static std::map<std::string, Weights> cache;
  const std::string key = m.name + dtype_name(dt);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_weights(m, dt)).first;
  return it->second;
}

// A GQA model small enough to run every cluster size in float32 quickly.
ModelConfig small_gqa() {
  ModelConfig m;
  m.name = "small-gqa";
  m.hidden = 512;
  m.num_heads = 8;
  m.num_kv_heads = 2;
  m.head_dim = 64;
  m.rope_theta = 10000.0f;
  return m;
}

// Ragged positions: 0, page edges, and the planned maximum - 1.
std::vector<int32_t> ragged_positions(int64_t batch) {
  const std::vector<int32_t> pool = {37, 0, int32_t(kMaxContext - 1), 15, 16, 17, 1, 100, 64,
                                     31, 33, 128, 2, 159 - 47, 80, 47};
  std::vector<int32_t> p(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) p[size_t(b)] = pool[size_t(b) % pool.size()];
  return p;
}

struct Case {
  ModelConfig model;
  int64_t batch;
  bool paged;
  DType dtype;
  int cluster;
  bool norm = true;
};

struct Inputs {
  Tensor x, positions, k, v, page_table;
  KvCache cache() const { return {k, v, page_table.data() ? TensorView(page_table) : TensorView{}}; }
};

Inputs make_inputs(const Case& c) {
  const ModelConfig& m = c.model;
  Inputs in;
  in.x = random_tensor({c.batch, m.hidden}, c.dtype, 21, -1.f, 1.f);
  in.positions = Tensor::empty({c.batch}, DType::kI32, Device::cpu());
  const std::vector<int32_t> pos = ragged_positions(c.batch);
  std::copy(pos.begin(), pos.end(), in.positions.data_as<int32_t>());
  const int64_t pages_per_seq = kMaxContext / kPageSize, num_pages = c.batch * pages_per_seq + 3;
  const std::vector<int64_t> shape =
      c.paged ? std::vector<int64_t>{num_pages, kPageSize, m.num_kv_heads, m.head_dim}
              : std::vector<int64_t>{c.batch, kMaxContext, m.num_kv_heads, m.head_dim};
  in.k = random_tensor(shape, c.dtype, 22, -1.f, 1.f);
  in.v = random_tensor(shape, c.dtype, 23, -1.f, 1.f);
  if (c.paged) {  // pages shuffled, so a sequence's pages are not adjacent
    std::vector<int32_t> pages(static_cast<size_t>(num_pages));
    for (int64_t i = 0; i < num_pages; ++i) pages[size_t(i)] = int32_t(i);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(24));
    in.page_table = Tensor::empty({c.batch, pages_per_seq}, DType::kI32, Device::cpu());
    std::copy_n(pages.begin(), c.batch * pages_per_seq, in.page_table.data_as<int32_t>());
  }
  return in;
}

double max_abs(const TensorView& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::fabs(load_as_float(t.data(), t.dtype(), i))));
  return m;
}

// Runs the case through AttentionBlock (fused: the split emulation) and the reference on
// copies of the same inputs; compares the outputs and the caches after the append.
void check_split_matches_reference(const Case& c, double rel_tol) {
  SCOPED_TRACE(::testing::Message() << c.model.name << " batch " << c.batch
                                    << (c.paged ? " paged" : " contiguous") << " "
                                    << dtype_name(c.dtype) << " cluster " << c.cluster
                                    << (c.norm ? "" : " no norm"));
  const ModelConfig& m = c.model;
  const Weights& w = weights_for(m, c.dtype);
  Inputs in = make_inputs(c);
  Tensor k_ref = copy_of(in.k), v_ref = copy_of(in.v);
  Tensor out = Tensor::empty({c.batch, m.hidden}, c.dtype, Device::cpu());
  Tensor out_ref = Tensor::empty({c.batch, m.hidden}, c.dtype, Device::cpu());

  AttentionBlock block({m, c.batch, kMaxContext, c.dtype, c.paged, kPageSize, Device::cpu(),
                        DecodeImpl::kFused, c.cluster});
  ASSERT_EQ(block.cluster_size(), c.cluster);
  block.run({in.x, in.positions, out}, w.view(c.norm), in.cache(), {}, Stream::cpu());
  const KvCache ref_cache{k_ref, v_ref, in.cache().page_table};
  reference_attention_block(m, {in.x, in.positions, out_ref}, w.view(c.norm), ref_cache, kPageSize);

  const double scale = max_abs(out_ref);
  ASSERT_GT(scale, 0.0);
  double worst = 0;
  for (int64_t i = 0; i < c.batch * m.hidden; ++i)
    worst = std::max(worst, std::fabs(double(load_as_float(out.data(), c.dtype, i)) -
                                      load_as_float(out_ref.data(), c.dtype, i)));
  EXPECT_LE(worst, rel_tol * scale) << "max |split - reference| = " << worst << ", max |reference| = " << scale;

  // Both appended the same new K/V (to the dtype's rounding) and touched nothing else.
  const TensorView kv[4] = {in.k, k_ref, in.v, v_ref};
  Tensor k0 = make_inputs(c).k, v0 = make_inputs(c).v;  // the caches before the step
  const TensorView before[2] = {k0, v0};
  const int64_t row = m.num_kv_heads * m.head_dim;
  std::vector<char> appended(static_cast<size_t>(in.k.view().numel() / row), 0);
  const int32_t* pos = in.positions.data_as<const int32_t>();
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t t = pos[b];
    const int64_t r = c.paged ? int64_t(in.page_table.data_as<int32_t>()[b * (kMaxContext / kPageSize) + t / kPageSize]) * kPageSize + t % kPageSize
                              : b * kMaxContext + t;
    appended[size_t(r)] = 1;
  }
  int64_t changed_elsewhere = 0, append_mismatch = 0;
  for (int which = 0; which < 2; ++which) {
    const TensorView& got = kv[2 * which];
    const TensorView& ref = kv[2 * which + 1];
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float g = load_as_float(got.data(), c.dtype, i), r = load_as_float(ref.data(), c.dtype, i);
      if (appended[size_t(i / row)]) {
        if (std::fabs(g - r) > rel_tol * 8 * (1.0 + std::fabs(r))) ++append_mismatch;
      } else if (g != load_as_float(before[which].data(), c.dtype, i) || r != g) {
        ++changed_elsewhere;
      }
    }
  }
  EXPECT_EQ(append_mismatch, 0) << "appended K/V differ from the reference's";
  EXPECT_EQ(changed_elsewhere, 0) << "cache rows other than the appended ones changed";
}

TEST(DecodeSplit, MatchesReferenceInFloat32ForEveryClusterSize) {
  for (int cluster : {1, 2, 4, 8, 16})
    for (bool paged : {false, true})
      check_split_matches_reference({small_gqa(), 3, paged, DType::kF32, cluster}, 2e-5);
  check_split_matches_reference({small_gqa(), 16, true, DType::kF32, 8, /*norm=*/false}, 2e-5);
}

class DecodeSplitModels : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeSplitModels, MatchesReferenceInBf16) {
  const ModelConfig m = ModelConfig::by_name(GetParam());
  for (int64_t batch : {1, 3, 16})
    for (bool paged : {false, true})
      check_split_matches_reference({m, batch, paged, DType::kBF16, batch == 3 ? 8 : 4}, 2e-2);
}

TEST_P(DecodeSplitModels, MatchesReferenceInFp16WithoutNorm) {
  const ModelConfig m = ModelConfig::by_name(GetParam());
  check_split_matches_reference({m, 3, true, DType::kF16, 16, /*norm=*/false}, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeSplitModels, ::testing::Values("llama2-7b", "llama3-8b"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---- bad input ---------------------------------------------------------------------------

void expect_error_naming(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "error '" << e.what() << "' does not name '" << needle << "'";
    return;
  }
  ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
}

AttentionBlockOptions small_options(int64_t batch = 3, bool paged = true) {
  return {small_gqa(), batch, kMaxContext, DType::kF32, paged, kPageSize, Device::cpu(),
          DecodeImpl::kFused, 2};
}

TEST(DecodeBadInput, PlanOptionsAreCheckedByName) {
  auto with = [](auto edit) {
    AttentionBlockOptions o = small_options();
    edit(o);
    return [o] { AttentionBlock b(o); };
  };
  expect_error_naming(with([](auto& o) { o.model.head_dim = 63; }), "model.head_dim = 63");
  expect_error_naming(with([](auto& o) { o.model.num_kv_heads = 3; }), "model.num_kv_heads = 3");
  expect_error_naming(with([](auto& o) { o.model.hidden = 0; }), "hidden");
  expect_error_naming(with([](auto& o) { o.max_batch = 0; }), "max_batch = 0");
  expect_error_naming(with([](auto& o) { o.max_context = 0; }), "max_context = 0");
  expect_error_naming(with([](auto& o) { o.page_size = 0; }), "page_size = 0");
  expect_error_naming(with([](auto& o) { o.dtype = DType::kI32; }), "dtype = i32");
  expect_error_naming(with([](auto& o) { o.cluster_size = 17; }), "cluster_size = 17");
  expect_error_naming(with([](auto& o) { o.cluster_size = 3; }), "cluster_size = 3");  // 512 % 3
}

TEST(DecodeBadInput, StepArgumentsAreCheckedByName) {
  const Case c{small_gqa(), 3, true, DType::kF32, 2};
  const AttentionBlock block(small_options());
  const Weights& w = weights_for(c.model, c.dtype);
  Inputs in = make_inputs(c);
  Tensor out = Tensor::empty({3, c.model.hidden}, DType::kF32, Device::cpu());
  auto run = [&](const DecodeStep& s, const AttentionWeights& aw, const KvCache& kv) {
    return [&, s, aw, kv] { block.run(s, aw, kv, {}, Stream::cpu()); };
  };
  const DecodeStep step{in.x, in.positions, out};
  // A context above the planned maximum.
  in.positions.data_as<int32_t>()[1] = int32_t(kMaxContext);
  expect_error_naming(run(step, w.view(true), in.cache()), "positions[1] = 160");
  in.positions.data_as<int32_t>()[1] = -1;
  expect_error_naming(run(step, w.view(true), in.cache()), "positions[1] = -1");
  in.positions.data_as<int32_t>()[1] = 5;
  // A page index out of range.
  in.page_table.data_as<int32_t>()[2 * (kMaxContext / kPageSize)] = 9999;
  expect_error_naming(run(step, w.view(true), in.cache()), "cache.page_table[2][0] = 9999");
  in.page_table.data_as<int32_t>()[2 * (kMaxContext / kPageSize)] = 0;
  // Shapes, dtypes and the batch bound.
  Tensor x_big = Tensor::empty({4, c.model.hidden}, DType::kF32, Device::cpu());
  expect_error_naming(run({x_big, in.positions, out}, w.view(true), in.cache()), "batch = 4");
  Tensor x_bf16 = Tensor::empty({3, c.model.hidden}, DType::kBF16, Device::cpu());
  expect_error_naming(run({x_bf16, in.positions, out}, w.view(true), in.cache()), "x");
  AttentionWeights swapped = w.view(true);
  swapped.wq = w.wk;
  expect_error_naming(run(step, swapped, in.cache()), "weights.wq");
  expect_error_naming(run(step, w.view(true), {in.k, in.v, {}}), "cache.page_table");
  Tensor short_table = Tensor::empty({3, 2}, DType::kI32, Device::cpu());
  expect_error_naming(run(step, w.view(true), {in.k, in.v, short_table}), "cache.page_table");
}

}  // namespace
}  // namespace tessera::decode
