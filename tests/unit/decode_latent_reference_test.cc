// The MLA decode attention block on the cpu backend. The float64 reference (latent_reference.h,
// what AttentionBlock runs for kLatent unfused): the absorbed form against MLA computed the other way round in this file,
// with the latent cache decompressed by W_UK and W_UV into per-head K and V and ordinary
// attention over them; small random models at batches 1 and 3, ragged positions (0 included),
// contiguous and shuffled paged caches, in float32 within 1e-9; the appended latent row and
// nothing else in the cache; DeepSeek-V2-Lite's real shape at batch 2 in bf16. The fused plan
// (the float32 emulation of the fused MLA dataflow, split_emulation.h) against that reference at
// every cluster size, batches 1, 3 and 16, paged and contiguous. Then the bad input the MLA
// plan and run() refuse, by the argument's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "decode/latent_reference.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"
#include "tessera/runtime/stream.h"

namespace tessera::decode {
namespace {

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
  std::copy_n(static_cast<const char*>(t.data()), t.view().span_bytes(),
              static_cast<char*>(c.data()));
  return c;
}

// An MLA model small enough to check exhaustively.
ModelConfig small_mla() {
  ModelConfig m;
  m.name = "small-mla";
  m.kind = AttentionKind::kLatent;
  m.hidden = 64;
  m.num_heads = 4;
  m.num_kv_heads = 1;
  m.kv_lora_rank = 32;
  m.rope_head_dim = 8;
  m.nope_head_dim = 16;
  m.v_head_dim = 16;
  m.head_dim = m.nope_head_dim + m.rope_head_dim;
  m.rope_theta = 10000.0f;
  m.rms_norm_eps = 1e-6f;
  return m;
}

struct LatentWeights {
  Tensor wq, wkv_a, kv_a_norm, wkv_b, wo, norm;
  LatentAttentionWeights view(bool with_norm = true) const {
    return {wq, wkv_a, kv_a_norm, wkv_b, wo, with_norm ? TensorView(norm) : TensorView{}};
  }
};

LatentWeights make_weights(const ModelConfig& m, DType dt) {
  const int64_t h = m.num_heads, r = m.kv_lora_rank, dr = m.rope_head_dim;
  const float sh = 1.0f / std::sqrt(float(m.hidden)), sr = 1.0f / std::sqrt(float(r));
  const float so = 1.0f / std::sqrt(float(h * m.v_head_dim));
  return {random_tensor({h * (m.nope_head_dim + dr), m.hidden}, dt, 31, -sh, sh),
          random_tensor({r + dr, m.hidden}, dt, 32, -sh, sh),
          random_tensor({r}, dt, 33, 0.5f, 1.5f),
          random_tensor({h * (m.nope_head_dim + m.v_head_dim), r}, dt, 34, -sr, sr),
          random_tensor({m.hidden, h * m.v_head_dim}, dt, 35, -so, so),
          random_tensor({m.hidden}, dt, 36, 0.5f, 1.5f)};
}

struct Case {
  ModelConfig model;
  std::vector<int32_t> positions;  // one per sequence
  bool paged;
  DType dtype;
  int64_t max_context;
  bool norm = true;
};

struct Inputs {
  Tensor x, positions, latent, page_table;
  KvCache cache() const {
    return {latent, {}, page_table.data() ? TensorView(page_table) : TensorView{}};
  }
};

Inputs make_inputs(const Case& c) {
  const ModelConfig& m = c.model;
  const int64_t batch = int64_t(c.positions.size()), width = m.kv_lora_rank + m.rope_head_dim;
  const int64_t pages_per_seq = (c.max_context + kPageSize - 1) / kPageSize;
  const int64_t num_pages = batch * pages_per_seq + 3;
  Inputs in;
  in.x = random_tensor({batch, m.hidden}, c.dtype, 41, -1.f, 1.f);
  in.positions = Tensor::empty({batch}, DType::kI32, Device::cpu());
  std::copy(c.positions.begin(), c.positions.end(), in.positions.data_as<int32_t>());
  in.latent = random_tensor(c.paged ? std::vector<int64_t>{num_pages, kPageSize, 1, width}
                                    : std::vector<int64_t>{batch, c.max_context, 1, width},
                            c.dtype, 42, -1.f, 1.f);
  if (c.paged) {  // pages shuffled, so a sequence's pages are not adjacent
    std::vector<int32_t> pages(static_cast<size_t>(num_pages));
    for (int64_t i = 0; i < num_pages; ++i) pages[size_t(i)] = int32_t(i);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(43));
    in.page_table = Tensor::empty({batch, pages_per_seq}, DType::kI32, Device::cpu());
    std::copy_n(pages.begin(), batch * pages_per_seq, in.page_table.data_as<int32_t>());
  }
  return in;
}

// The latent cache row of token t of sequence b, addressed here without cpu_cache.h.
int64_t latent_row(const Case& c, const Inputs& in, int64_t b, int64_t t) {
  if (!c.paged) return b * c.max_context + t;
  const int64_t pages_per_seq = in.page_table.view().size(1);
  return int64_t(in.page_table.data_as<const int32_t>()[b * pages_per_seq + t / kPageSize]) *
             kPageSize +
         t % kPageSize;
}

double at(const TensorView& t, int64_t i) {
  return load_as_float(t.data(), t.dtype(), i);
}

// y = W x for W [rows, cols] (rows [row0, row0 + n)), in float64.
std::vector<double> project(const TensorView& w, const std::vector<double>& x, int64_t row0,
                            int64_t n) {
  const int64_t cols = w.size(1);
  std::vector<double> y(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < cols; ++c) y[size_t(r)] += at(w, (row0 + r) * cols + c) * x[size_t(c)];
  return y;
}

void rmsnorm_in_place(std::vector<double>& v, const TensorView& weight, float eps) {
  double ms = 0;
  for (double e : v) ms += e * e;
  ms /= double(v.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = v[i] / std::sqrt(ms + eps) * at(weight, int64_t(i));
}

// Rotates the interleaved pairs (2i, 2i+1) of v[first, first + d) by pos * inv_freq_i.
void rotate_pairs(std::vector<double>& v, size_t first, int64_t d, int64_t pos,
                  const std::vector<float>& inv_freq) {
  for (int64_t i = 0; i < d / 2; ++i) {
    const double a = double(pos) * inv_freq[size_t(i)];
    double& e0 = v[first + size_t(2 * i)];
    double& e1 = v[first + size_t(2 * i + 1)];
    const double x0 = e0, x1 = e1;
    e0 = x0 * std::cos(a) - x1 * std::sin(a);
    e1 = x0 * std::sin(a) + x1 * std::cos(a);
  }
}

struct Expected {
  std::vector<double> out;                    // [B][hidden]
  std::vector<std::vector<double>> new_rows;  // per sequence: [c, kr] as stored (dtype-rounded)
};

// MLA without absorption: the new latent row appended to (a view of) `in`'s cache, every cached
// row decompressed into per-head keys [W_UK_h c_t, kr_t] and values W_UV_h c_t, ordinary
// softmax attention with the full query [qn_h, rope(qr_h)], then Wo.
Expected decompressed_mla(const Case& c, const LatentWeights& lw, const Inputs& in) {
  const ModelConfig& m = c.model;
  const LatentAttentionWeights w = lw.view(c.norm);
  const int64_t batch = int64_t(c.positions.size()), hidden = m.hidden, heads = m.num_heads;
  const int64_t r = m.kv_lora_rank, dr = m.rope_head_dim, dn = m.nope_head_dim, dv = m.v_head_dim;
  const int64_t width = r + dr;
  const std::vector<float> inv_freq = rope_inv_freq(m);
  Expected e;
  e.out.assign(size_t(batch * hidden), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pos = c.positions[size_t(b)];
    std::vector<double> x(static_cast<size_t>(hidden));
    for (int64_t i = 0; i < hidden; ++i) x[size_t(i)] = at(in.x, b * hidden + i);
    if (c.norm) rmsnorm_in_place(x, w.input_norm, m.rms_norm_eps);
    std::vector<double> q = project(w.wq, x, 0, heads * (dn + dr));
    std::vector<double> ckv = project(w.wkv_a, x, 0, width);
    std::vector<double> latent(ckv.begin(), ckv.begin() + r);
    rmsnorm_in_place(latent, w.kv_a_norm, m.rms_norm_eps);
    std::copy(latent.begin(), latent.end(), ckv.begin());
    rotate_pairs(ckv, size_t(r), dr, pos, inv_freq);
    for (double& v : ckv) v = round_to_dtype(c.dtype, float(v));
    e.new_rows.push_back(ckv);

    // Every cached row, the new one in its place.
    std::vector<std::vector<double>> rows(size_t(pos + 1));
    for (int64_t t = 0; t < pos; ++t) {
      const int64_t row = latent_row(c, in, b, t);
      for (int64_t i = 0; i < width; ++i) rows[size_t(t)].push_back(at(in.latent, row * width + i));
    }
    rows[size_t(pos)] = ckv;

    std::vector<double> o(size_t(heads * dv), 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      rotate_pairs(q, size_t(h * (dn + dr) + dn), dr, pos, inv_freq);
      std::vector<double> scores(size_t(pos + 1));
      std::vector<std::vector<double>> values(size_t(pos + 1));
      for (int64_t t = 0; t <= pos; ++t) {
        const std::vector<double> ct(rows[size_t(t)].begin(), rows[size_t(t)].begin() + r);
        const std::vector<double> key = project(w.wkv_b, ct, h * (dn + dv), dn);
        values[size_t(t)] = project(w.wkv_b, ct, h * (dn + dv) + dn, dv);
        double s = 0;
        for (int64_t i = 0; i < dn; ++i) s += q[size_t(h * (dn + dr) + i)] * key[size_t(i)];
        for (int64_t i = 0; i < dr; ++i)
          s += q[size_t(h * (dn + dr) + dn + i)] * rows[size_t(t)][size_t(r + i)];
        scores[size_t(t)] = s / std::sqrt(double(dn + dr));
      }
      const double smax = *std::max_element(scores.begin(), scores.end());
      double denom = 0;
      for (double s : scores) denom += std::exp(s - smax);
      for (int64_t t = 0; t <= pos; ++t)
        for (int64_t i = 0; i < dv; ++i)
          o[size_t(h * dv + i)] +=
              std::exp(scores[size_t(t)] - smax) / denom * values[size_t(t)][size_t(i)];
    }
    const std::vector<double> out = project(w.wo, o, 0, hidden);
    std::copy(out.begin(), out.end(), e.out.begin() + b * hidden);
  }
  return e;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// The absorbed reference and AttentionBlock (on copies of the same inputs) against the
// decompressed form: the float64 outputs within rel_tol of the largest, the block's output
// within its dtype's rounding; the appended rows as computed here, the rest of the cache as it
// was.
void check_absorbed_matches_decompressed(const Case& c, double rel_tol) {
  std::string where = c.model.name + " positions";
  for (int32_t p : c.positions) where += " " + std::to_string(p);
  SCOPED_TRACE(where + (c.paged ? " paged " : " contiguous ") + dtype_name(c.dtype) +
               (c.norm ? "" : " no norm"));
  const ModelConfig& m = c.model;
  const int64_t batch = int64_t(c.positions.size()), width = m.kv_lora_rank + m.rope_head_dim;
  const LatentWeights lw = make_weights(m, c.dtype);
  const Inputs in = make_inputs(c);
  const Expected want = decompressed_mla(c, lw, in);
  const double scale = max_abs(want.out);
  ASSERT_GT(scale, 0.0);

  Tensor ref_latent = copy_of(in.latent);
  Tensor unused = Tensor::empty({batch, m.hidden}, c.dtype, Device::cpu());
  const std::vector<double> ref =
      latent_reference_output(m, {in.x, in.positions, unused}, lw.view(c.norm),
                              {ref_latent, {}, in.cache().page_table}, kPageSize);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - want.out[i]));
  EXPECT_LE(worst, rel_tol * scale)
      << "max |absorbed - decompressed| = " << worst << ", max |decompressed| = " << scale;

  Tensor block_latent = copy_of(in.latent);
  Tensor out = Tensor::empty({batch, m.hidden}, c.dtype, Device::cpu());
  const AttentionBlock block(
      {m, batch, c.max_context, c.dtype, c.paged, kPageSize, Device::cpu(), DecodeImpl::kUnfused});
  EXPECT_EQ(block.impl(), DecodeImpl::kUnfused);
  block.run({in.x, in.positions, out}, lw.view(c.norm), {block_latent, {}, in.cache().page_table},
            {}, Stream::cpu());
  const double ulp = c.dtype == DType::kF32 ? 0x1p-24 : c.dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
  int64_t out_mismatch = 0;
  for (int64_t i = 0; i < batch * m.hidden; ++i) {
    const double got = at(out, i), w = want.out[size_t(i)];
    if (std::fabs(got - w) > rel_tol * scale + ulp * std::fabs(w)) ++out_mismatch;
  }
  EXPECT_EQ(out_mismatch, 0) << "block outputs off the decompressed form by more than rounding";

  // The block's and the reference's caches: the appended rows as computed here (rounding the
  // same value to the dtype: at most one ulp apart), every other row unchanged.
  std::vector<char> appended(size_t(block_latent.view().numel() / width), 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t row = latent_row(c, in, b, c.positions[size_t(b)]);
    appended[size_t(row)] = 1;
    for (int64_t i = 0; i < width; ++i) {
      const double w = want.new_rows[size_t(b)][size_t(i)];
      const double g = at(block_latent, row * width + i), r = at(ref_latent, row * width + i);
      EXPECT_LE(std::fabs(g - w), 2 * ulp * std::fabs(w)) << "sequence " << b << " dim " << i;
      EXPECT_EQ(g, r) << "sequence " << b << " dim " << i;
    }
  }
  int64_t changed_elsewhere = 0;
  for (int64_t i = 0; i < block_latent.view().numel(); ++i)
    if (!appended[size_t(i / width)] &&
        (at(block_latent, i) != at(in.latent, i) || at(ref_latent, i) != at(in.latent, i)))
      ++changed_elsewhere;
  EXPECT_EQ(changed_elsewhere, 0) << "latent rows other than the appended ones changed";
}

TEST(DecodeLatent, AbsorbedMatchesDecompressedInFloat32) {
  for (bool paged : {false, true}) {
    for (const std::vector<int32_t>& positions :
         {std::vector<int32_t>{0}, std::vector<int32_t>{37}, std::vector<int32_t>{17, 0, 47}}) {
      check_absorbed_matches_decompressed({small_mla(), positions, paged, DType::kF32, 48}, 1e-9);
    }
  }
  check_absorbed_matches_decompressed(
      {small_mla(), {15, 16, 1}, true, DType::kF32, 48, /*norm=*/false}, 1e-9);
}

TEST(DecodeLatent, AbsorbedMatchesDecompressedInBf16) {
  check_absorbed_matches_decompressed({small_mla(), {17, 0, 47}, true, DType::kBF16, 48}, 1e-9);
}

TEST(DecodeLatent, DeepSeekV2LiteRunsOnTheCpuBackend) {
  const ModelConfig m = ModelConfig::deepseek_v2_lite();
  const AttentionBlock unfused(
      {m, 2, 40, DType::kBF16, true, kPageSize, Device::cpu(), DecodeImpl::kUnfused});
  EXPECT_EQ(unfused.describe(), "deepseek-v2-lite unfused bf16 paged");
  EXPECT_EQ(unfused.workspace_bytes(), 0u);
  // auto: the emulated fused split, a cluster of 8 a head (16 heads x 8 fill 128 CTAs).
  const AttentionBlock fused({m, 2, 40, DType::kBF16, true, kPageSize, Device::cpu()});
  EXPECT_EQ(fused.impl(), DecodeImpl::kFused);
  EXPECT_EQ(fused.describe(), "deepseek-v2-lite fused cluster 8 (cost model) bf16 paged");
  check_absorbed_matches_decompressed({m, {39, 21}, true, DType::kBF16, 40}, 1e-9);
  check_absorbed_matches_decompressed({m, {0, 39}, false, DType::kBF16, 40}, 1e-9);
}

// ---- the fused MLA dataflow, emulated (split_geometry.h) ----------------------------------

// Ragged positions for `batch` sequences below max_context (0 among them).
std::vector<int32_t> ragged_positions(int64_t batch, int64_t max_context) {
  std::vector<int32_t> p;
  for (int64_t b = 0; b < batch; ++b) p.push_back(int32_t((b * 29 + (b == 0 ? 39 : 0)) % max_context));
  return p;
}

// The fused plan (the float32 emulation of the kernel's split at `cluster`) against the float64
// reference on copies of the same inputs: outputs within rel_tol of the largest, the appended
// latent rows within one step of the dtype (float32: rel_tol) of the reference's, every other
// row untouched.
void check_split_matches_reference(const Case& c, int cluster, double rel_tol) {
  SCOPED_TRACE(c.model.name + " batch " + std::to_string(c.positions.size()) + " cluster " +
               std::to_string(cluster) + (c.paged ? " paged " : " contiguous ") +
               dtype_name(c.dtype) + (c.norm ? "" : " no norm"));
  const ModelConfig& m = c.model;
  const int64_t batch = int64_t(c.positions.size()), width = m.kv_lora_rank + m.rope_head_dim;
  const LatentWeights lw = make_weights(m, c.dtype);
  const Inputs in = make_inputs(c);
  Tensor ref_latent = copy_of(in.latent), split_latent = copy_of(in.latent);
  Tensor out_ref = Tensor::empty({batch, m.hidden}, c.dtype, Device::cpu());
  Tensor out = Tensor::empty({batch, m.hidden}, c.dtype, Device::cpu());
  const KvCache ref_cache{ref_latent, {}, in.cache().page_table};
  reference_latent_attention_block(m, {in.x, in.positions, out_ref}, lw.view(c.norm), ref_cache,
                                   kPageSize);
  const AttentionBlock block({m, batch, c.max_context, c.dtype, c.paged, kPageSize, Device::cpu(),
                              DecodeImpl::kFused, cluster});
  ASSERT_EQ(block.impl(), DecodeImpl::kFused);
  ASSERT_EQ(block.cluster_size(), cluster);
  block.run({in.x, in.positions, out}, lw.view(c.norm), {split_latent, {}, in.cache().page_table},
            {}, Stream::cpu());

  double scale = 0, worst = 0;
  for (int64_t i = 0; i < batch * m.hidden; ++i) {
    scale = std::max(scale, std::fabs(at(out_ref, i)));
    worst = std::max(worst, std::fabs(at(out, i) - at(out_ref, i)));
  }
  ASSERT_GT(scale, 0.0);
  EXPECT_LE(worst, rel_tol * scale) << "max |split - reference| = " << worst
                                    << ", max |reference| = " << scale;
  // One step of a 16-bit dtype (rounding the same value computed in float32 and float64); in
  // float32 the computation's own error.
  const double step = c.dtype == DType::kF32 ? rel_tol : c.dtype == DType::kBF16 ? 0x1p-7 : 0x1p-10;
  std::vector<char> appended(size_t(in.latent.view().numel() / width), 0);
  for (int64_t b = 0; b < batch; ++b) appended[size_t(latent_row(c, in, b, c.positions[size_t(b)]))] = 1;
  int64_t append_mismatch = 0, changed_elsewhere = 0;
  for (int64_t i = 0; i < in.latent.view().numel(); ++i) {
    const double g = at(split_latent, i), r = at(ref_latent, i);
    if (appended[size_t(i / width)]) {
      if (std::fabs(g - r) > step * std::max(1.0, std::fabs(r))) ++append_mismatch;
    } else if (g != at(in.latent, i)) {
      ++changed_elsewhere;
    }
  }
  EXPECT_EQ(append_mismatch, 0) << "appended latent rows differ from the reference's";
  EXPECT_EQ(changed_elsewhere, 0) << "latent rows other than the appended ones changed";
}

TEST(DecodeLatentSplit, MatchesTheReferenceInFloat32ForEveryClusterSize) {
  for (int cluster : {1, 2, 4, 8})
    for (bool paged : {false, true})
      check_split_matches_reference({small_mla(), {17, 0, 47}, paged, DType::kF32, 48}, cluster,
                                    2e-5);
  check_split_matches_reference(
      {small_mla(), ragged_positions(16, 48), true, DType::kF32, 48, /*norm=*/false}, 8, 2e-5);
}

TEST(DecodeLatentSplit, DeepSeekV2LiteMatchesTheReferenceInBf16) {
  const ModelConfig m = ModelConfig::deepseek_v2_lite();
  for (int64_t batch : {1, 3, 16})
    for (bool paged : {false, true})
      check_split_matches_reference({m, ragged_positions(batch, 40), paged, DType::kBF16, 40},
                                    batch == 3 ? 16 : 8, 2e-2);
  check_split_matches_reference(
      {m, ragged_positions(3, 40), true, DType::kF16, 40, /*norm=*/false}, 4, 1e-2);
}

// ---- bad input ---------------------------------------------------------------------------

void expect_error_naming(const std::function<void()>& fn, const std::string& needle,
                         ErrorCode code = ErrorCode::kInvalidArgument) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "error '" << e.what() << "' does not name '" << needle << "'";
    EXPECT_EQ(e.code(), code) << e.what();
    return;
  }
  ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
}

AttentionBlockOptions small_options(int64_t batch = 3, bool paged = true) {
  return {small_mla(), batch, 48, DType::kF32, paged, kPageSize, Device::cpu()};
}

TEST(DecodeLatentBadInput, PlanOptionsAreCheckedByName) {
  auto with = [](auto edit) {
    AttentionBlockOptions o = small_options();
    edit(o);
    return [o] { AttentionBlock b(o); };
  };
  expect_error_naming(with([](auto& o) { o.model.rope_head_dim = 7; }), "model.rope_head_dim = 7");
  expect_error_naming(with([](auto& o) { o.model.kv_lora_rank = 0; }), "kv_lora_rank");
  for (const std::string needle : {"cluster_size = 3", "kv_lora_rank = 32",
                                   "nope_head_dim + rope_head_dim = 24"})
    expect_error_naming(with([](auto& o) { o.cluster_size = 3; }), needle);
  expect_error_naming(with([](auto& o) { o.cluster_size = 16; }), "cluster_size = 16");
  expect_error_naming(with([](auto& o) { o.max_context = 0; }), "max_context = 0");
  expect_error_naming(with([](auto& o) { o.dtype = DType::kI32; }), "dtype = i32");
#ifndef TESSERA_WITH_CUDA
  expect_error_naming(with([](auto& o) {
                        o.model = ModelConfig::deepseek_v2_lite();
                        o.dtype = DType::kBF16;
                        o.device = Device::cuda(0);
                      }),
                      "no cuda backend", ErrorCode::kUnsupported);
#endif
}

TEST(DecodeLatentBadInput, StepArgumentsAreCheckedByName) {
  const Case c{small_mla(), {17, 0, 47}, true, DType::kF32, 48};
  const AttentionBlock block(small_options());
  const LatentWeights w = make_weights(c.model, c.dtype);
  Inputs in = make_inputs(c);
  Tensor out = Tensor::empty({3, c.model.hidden}, DType::kF32, Device::cpu());
  const DecodeStep step{in.x, in.positions, out};
  auto run = [&](const DecodeStep& s, const LatentAttentionWeights& lw, const KvCache& kv) {
    return [&, s, lw, kv] { block.run(s, lw, kv, {}, Stream::cpu()); };
  };
  // Weight shapes and dtypes.
  LatentAttentionWeights bad = w.view();
  bad.wkv_b = w.wo;
  expect_error_naming(run(step, bad, in.cache()), "weights.wkv_b");
  bad = w.view();
  bad.wkv_a = w.wq;
  expect_error_naming(run(step, bad, in.cache()), "weights.wkv_a");
  bad = w.view();
  bad.kv_a_norm = w.norm;  // [hidden], not [kv_lora_rank]
  expect_error_naming(run(step, bad, in.cache()), "weights.kv_a_norm");
  bad = w.view();
  bad.kv_a_norm = {};
  expect_error_naming(run(step, bad, in.cache()), "weights.kv_a_norm");
  bad = w.view();
  bad.wo = w.wkv_b;
  expect_error_naming(run(step, bad, in.cache()), "weights.wo");
  const LatentWeights w_bf16 = make_weights(c.model, DType::kBF16);
  bad = w.view();
  bad.wq = w_bf16.wq;
  expect_error_naming(run(step, bad, in.cache()), "weights.wq");
  Tensor x_bf16 = Tensor::empty({3, c.model.hidden}, DType::kBF16, Device::cpu());
  expect_error_naming(run({x_bf16, in.positions, out}, w.view(), in.cache()), "x");
  // The cache: a latent row of the wrong width, a v, no page table, a page out of range.
  Tensor narrow = Tensor::empty({10, kPageSize, 1, 33}, DType::kF32, Device::cpu());
  expect_error_naming(run(step, w.view(), {narrow, {}, in.page_table}), "cache.k");
  expect_error_naming(run(step, w.view(), {in.latent, in.latent, in.page_table}), "cache.v");
  expect_error_naming(run(step, w.view(), {in.latent, {}, {}}), "cache.page_table");
  const int64_t pages_per_seq = in.page_table.view().size(1);
  in.page_table.data_as<int32_t>()[2 * pages_per_seq] = 9999;
  expect_error_naming(run(step, w.view(), in.cache()), "cache.page_table[2][0] = 9999");
  in.page_table.data_as<int32_t>()[2 * pages_per_seq] = 0;
  // A context above the planned maximum.
  in.positions.data_as<int32_t>()[1] = 48;
  expect_error_naming(run(step, w.view(), in.cache()), "positions[1] = 48");
  in.positions.data_as<int32_t>()[1] = -1;
  expect_error_naming(run(step, w.view(), in.cache()), "positions[1] = -1");
  in.positions.data_as<int32_t>()[1] = 0;
  // One kind's weights to the other kind's plan.
  const AttentionWeights gqa{w.wq, w.wkv_a, w.wkv_a, w.wo, w.norm};
  expect_error_naming([&] { block.run(step, gqa, in.cache(), {}, Stream::cpu()); }, "weights: ");
  ModelConfig gqa_model;
  gqa_model.name = "small-gqa";
  gqa_model.hidden = 64;
  gqa_model.num_heads = gqa_model.num_kv_heads = 4;
  gqa_model.head_dim = 16;
  const AttentionBlock gqa_block({gqa_model, 3, 48, DType::kF32, true, kPageSize, Device::cpu()});
  expect_error_naming([&] { gqa_block.run(step, w.view(), in.cache(), {}, Stream::cpu()); },
                      "weights: ");
}

}  // namespace
}  // namespace tessera::decode
