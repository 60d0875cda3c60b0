// GPU tests of the fused decode attention block (decode::AttentionBlock on cuda) against the
// float64 reference (src/decode/reference.h) at the real Llama-2-7B and Llama-3-8B shapes:
// batches 1, 3 and 16, contiguous and paged caches, ragged positions (0 included), several
// cluster sizes. The output is poisoned first and must be fully written; the new K/V rows
// must land in the cache and every other row stay untouched; 100 replays of a captured CUDA
// graph must give bitwise the same output. The same for the fused MLA kernel at
// DeepSeek-V2-Lite's shape (batches 1, 3 and 16, cluster sizes 1 to 16), and its unfused path
// with its attention on CUDA cores and on tensor cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "decode/latent_reference.h"
#include "decode/reference.h"
#include "gpu/sanitize_env.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"
#include "tessera/runtime/memory.h"
#include "tessera/runtime/stream.h"

#include <cuda_runtime.h>

namespace tessera::decode {
namespace {

constexpr DType kBf16 = DType::kBF16;
constexpr int64_t kMaxContext = 256;
constexpr int64_t kPageSize = 16;

using test::few_cases;
using test::graph_replays;

struct Case {  // one decode step's shape
  int64_t batch;
  bool paged;
  int cluster;  // 0: the cost model's pick
};

// Batches 1, 3 and 16, contiguous and paged, at the cost model's cluster size; then `more`.
std::vector<Case> every_batch_and_layout(std::vector<Case> more) {
  std::vector<Case> out;
  for (int64_t batch : {1, 3, 16})
    for (bool paged : {false, true}) out.push_back({batch, paged, 0});
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

using test::pick;

// DeepSeek-V2-Lite's attention; with few cases (the sanitize stage) 2 query heads and hidden 512:
// the fused kernel's dimensions are run-time values, so the same code paths at a thirtieth of the
// work (racecheck did not finish one real-shape step in 6 minutes).
ModelConfig mla_model() {
  ModelConfig m = ModelConfig::deepseek_v2_lite();
  if (!few_cases()) return m;
  m.name = "deepseek-v2-lite (2 heads, hidden 512)";
  m.num_heads = 2;
  m.hidden = 512;
  return m;
}

// Llama-3-8B's hidden size with other heads: `heads` query and `kv_heads` KV heads of head_dim.
ModelConfig llama3_with_heads(int heads, int kv_heads, int head_dim) {
  ModelConfig m = ModelConfig::llama3_8b();
  m.name = "head_dim " + std::to_string(head_dim) + ", " + std::to_string(heads) + ":" +
           std::to_string(kv_heads) + " heads";
  m.num_heads = heads;
  m.num_kv_heads = kv_heads;
  m.head_dim = head_dim;
  return m;
}

struct Pair {  // host and device copies of one tensor
  Tensor host, device;
};

class DecodeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = Stream::create_cuda(0);
  }
  Pair random(std::vector<int64_t> shape, DType dt, uint32_t seed, float lo, float hi) {
    Pair p{Tensor::empty(shape, dt, Device::cpu()), Tensor::empty(shape, dt, Device::cuda(0))};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < p.host.view().numel(); ++i) store_from_float(p.host.data(), dt, i, dist(rng));
    upload(p);
    return p;
  }
  size_t bytes(const Tensor& t) { return size_t(t.view().numel()) * t.view().element_size(); }
  void upload(const Pair& p) { copy_bytes(p.device.data(), p.host.data(), bytes(p.host), stream_); }
  void download(Tensor& host, const Tensor& device) {
    copy_bytes(host.data(), device.data(), bytes(host), stream_);
    stream_.synchronize();
  }

  // The planned maximum context of the steps below (kMaxContext unless a test sets more).
  int64_t max_context_ = kMaxContext;
  // Pages of a paged cache for `batch` sequences: max_context_'s worth each, and a few spare.
  int64_t cache_pages(int64_t batch) const { return batch * (max_context_ / kPageSize) + 3; }
  // A shuffled page table: each sequence owns max_context_'s worth of scattered pages.
  Pair page_table(int64_t batch, uint32_t seed) {
    const int64_t pages_per_seq = max_context_ / kPageSize, num_pages = cache_pages(batch);
    Pair table{Tensor::empty({batch, pages_per_seq}, DType::kI32, Device::cpu()),
               Tensor::empty({batch, pages_per_seq}, DType::kI32, Device::cuda(0))};
    std::vector<int32_t> pages(num_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(seed));
    std::copy_n(pages.begin(), batch * pages_per_seq, table.host.data_as<int32_t>());
    upload(table);
    return table;
  }
  // Ragged positions below max_context_, 0 among them.
  Pair ragged_positions(int64_t batch) {
    Pair pos{Tensor::empty({batch}, DType::kI32, Device::cpu()), Tensor::empty({batch}, DType::kI32, Device::cuda(0))};
    const int32_t ragged[] = {130, 0, 37, 255, 16, 1, 200, 64, 15, 17, 99, 128, 31, 33, 250, 7};
    for (int64_t b = 0; b < batch; ++b)
      pos.host.data_as<int32_t>()[b] = int32_t(ragged[b % 16] * (max_context_ / kMaxContext));
    upload(pos);
    return pos;
  }
  // The GPU's output (poisoned before the step) fully written and within bf16 error of the
  // float64 reference's.
  void expect_near_reference(const Tensor& out_h, const Tensor& ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float g = load_as_float(out_h.data(), kBf16, i), r = ref.data_as<float>()[i];
      ASSERT_TRUE(std::isfinite(g)) << "output element " << i << " not written or not finite";
      num += (g - r) * (g - r);
      den += double(r) * r;
    }
    EXPECT_LT(std::sqrt(num / den), 1e-2) << "relative L2 error against the float64 reference";
  }
  // The reference appended to its cache (host, was `before`); the GPU's cache (downloaded into
  // `gpu`) must hold the same rows (within one bf16 rounding) and nothing else changed.
  // `tolerance`: relative, at least absolute below 1.
  void expect_same_append(const Tensor& before, const Tensor& gpu, const Tensor& ref,
                          float tolerance = 1e-2f) {
    int64_t changed = 0, mismatched = 0;
    for (int64_t i = 0; i < gpu.view().numel(); ++i) {
      const float b0 = load_as_float(before.data(), kBf16, i);
      const float g = load_as_float(gpu.data(), kBf16, i), r = load_as_float(ref.data(), kBf16, i);
      if (r != b0) ++changed;
      if (std::fabs(g - r) > tolerance * std::max(1.f, std::fabs(r))) ++mismatched;
    }
    EXPECT_EQ(mismatched, 0) << "cache elements differing from the reference's append";
    EXPECT_GT(changed, 0) << "the reference appended nothing: the test would not see a missing append";
  }

  // An uninitialized host tensor of t's shape and dtype.
  static Tensor host_like(const Tensor& t) {
    std::vector<int64_t> shape;
    for (int i = 0; i < t.view().ndim(); ++i) shape.push_back(t.view().size(i));
    return Tensor::empty(shape, t.view().dtype(), Device::cpu());
  }

  // One step of `block` over `cache` (sequences at positions 100, 137, ..., new tokens from
  // seed `x_seed`), warmed up, then replayed from a graph: expect_replays_bitwise.
  template <typename LayerWeights>
  void expect_block_replays_bitwise(const AttentionBlock& block, const ModelConfig& m, int64_t batch,
                                    const LayerWeights& w, const KvCache& cache, uint32_t x_seed) {
    Pair x = random({batch, m.hidden}, kBf16, x_seed, -1.f, 1.f);
    Pair pos{Tensor::empty({batch}, DType::kI32, Device::cpu()), Tensor::empty({batch}, DType::kI32, Device::cuda(0))};
    for (int64_t b = 0; b < batch; ++b) pos.host.data_as<int32_t>()[b] = int32_t(100 + 37 * b);
    upload(pos);
    Tensor out = Tensor::empty({batch, m.hidden}, kBf16, Device::cuda(0));
    Tensor ws = Tensor::empty({int64_t(block.workspace_bytes())}, DType::kU8, Device::cuda(0));
    const DecodeStep step{x.device, pos.device, out};
    block.run(step, w.device(), cache, ws, stream_);  // warm up (sets kernel attributes)
    stream_.synchronize();
    expect_replays_bitwise([&] { block.run(step, w.device(), cache, ws, stream_); }, out);
  }

  // `run` (warmed up already) captured in a CUDA graph and replayed graph_replays() times, `out`
  // poisoned before each: every replay's output bitwise the first's.
  template <typename Run>
  void expect_replays_bitwise(Run&& run, const Tensor& out) {
    auto s = static_cast<cudaStream_t>(stream_.cuda_stream());
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    run();
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    Tensor first = host_like(out), again = host_like(out);
    const int replays = graph_replays();
    for (int replay = 0; replay < replays; ++replay) {
      fill_bytes(out.data(), 0xFF, bytes(first), stream_);
      ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
      download(replay == 0 ? first : again, out);
      if (replay > 0)
        ASSERT_EQ(0, std::memcmp(first.data(), again.data(), bytes(first))) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }

  // A step's cache: [cache_pages, page size, heads, width] paged, else [batch, max_context_,
  // heads, width].
  std::vector<int64_t> cache_shape(bool paged, int64_t batch, int64_t heads, int64_t width) const {
    return paged ? std::vector<int64_t>{cache_pages(batch), kPageSize, heads, width}
                 : std::vector<int64_t>{batch, max_context_, heads, width};
  }
  Tensor host_copy(const Tensor& t) {  // of a host tensor
    Tensor copy = host_like(t);
    std::memcpy(copy.data(), t.data(), bytes(t));
    return copy;
  }

  // A step's output on the device (poisoned), its host copy, the float32 reference's, and the
  // block's workspace.
  struct StepOutputs {
    Tensor device, host, ref, workspace;
  };
  StepOutputs step_outputs(const AttentionBlock& block, int64_t batch, int64_t hidden) {
    StepOutputs o{Tensor::empty({batch, hidden}, kBf16, Device::cuda(0)),
                  Tensor::empty({batch, hidden}, kBf16, Device::cpu()),
                  Tensor::empty({batch, hidden}, DType::kF32, Device::cpu()),
                  Tensor::empty({int64_t(block.workspace_bytes())}, DType::kU8, Device::cuda(0))};
    fill_bytes(o.device.data(), 0xFF, bytes(o.device), stream_);
    return o;
  }

  struct Weights {
    Pair wq, wk, wv, wo, norm;
    AttentionWeights host() const { return {wq.host, wk.host, wv.host, wo.host, norm.host}; }
    AttentionWeights device() const { return {wq.device, wk.device, wv.device, wo.device, norm.device}; }
  };
  Weights weights(const ModelConfig& m) {
    const float s = 1.0f / std::sqrt(float(m.hidden));
    const int64_t q = m.num_heads * m.head_dim, kv = m.num_kv_heads * m.head_dim;
    return {random({q, m.hidden}, kBf16, 11, -s, s), random({kv, m.hidden}, kBf16, 12, -s, s),
            random({kv, m.hidden}, kBf16, 13, -s, s), random({m.hidden, q}, kBf16, 14, -s, s),
            random({m.hidden}, kBf16, 15, 0.5f, 1.5f)};
  }

  // One step on the GPU and on the reference; checks the output and the caches.
  // poison_tail: every cache slot past a sequence's new token holds NaN (the kernels must not
  // read them into the result: a masked score times NaN is still NaN).
  void check_step(const ModelConfig& m, const Weights& w, int64_t batch, bool paged, int cluster,
                  DecodeImpl impl = DecodeImpl::kFused, bool poison_tail = false) {
    SCOPED_TRACE(::testing::Message() << m.name << " batch " << batch << (paged ? " paged" : " contiguous")
                                      << " cluster " << cluster << " max context " << max_context_
                                      << (impl == DecodeImpl::kUnfused ? " unfused" : " fused"));
    AttentionBlockOptions o{m, batch, max_context_, kBf16, paged, kPageSize, Device::cuda(0),
                            impl, cluster};
    AttentionBlock block(o);
    ASSERT_EQ(block.impl(), impl);
    const std::vector<int64_t> shape = cache_shape(paged, batch, m.num_kv_heads, m.head_dim);
    Pair k = random(shape, kBf16, 21, -1.f, 1.f), v = random(shape, kBf16, 22, -1.f, 1.f);
    const Pair table = page_table(batch, 5);
    const Pair pos = ragged_positions(batch);
    if (poison_tail) {
      const int64_t row_elems = m.num_kv_heads * m.head_dim;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = pos.host.data_as<int32_t>()[b] + 1; t < max_context_; ++t) {
          const int64_t row =
              paged ? int64_t(table.host.data_as<int32_t>()[b * (max_context_ / kPageSize) +
                                                            t / kPageSize]) *
                              kPageSize +
                          t % kPageSize
                    : b * max_context_ + t;
          for (int64_t e = 0; e < row_elems; ++e) {
            store_from_float(k.host.data(), kBf16, row * row_elems + e, std::nanf(""));
            store_from_float(v.host.data(), kBf16, row * row_elems + e, std::nanf(""));
          }
        }
      }
      upload(k);
      upload(v);
    }
    Pair x = random({batch, m.hidden}, kBf16, 31, -1.f, 1.f);
    StepOutputs out = step_outputs(block, batch, m.hidden);

    const TensorView no_table{};
    KvCache dcache{k.device, v.device, paged ? TensorView(table.device) : no_table};
    KvCache hcache{k.host, v.host, paged ? TensorView(table.host) : no_table};
    const Tensor k_before = host_copy(k.host);
    block.run({x.device, pos.device, out.device}, w.device(), dcache, out.workspace, stream_);
    reference_attention_block(m, {x.host, pos.host, out.ref}, w.host(), hcache, kPageSize);
    download(out.host, out.device);
    expect_near_reference(out.host, out.ref, batch * m.hidden);
    // The K cache: the reference appended k_new to k.host.
    Tensor k_gpu = Tensor::empty(shape, kBf16, Device::cpu());
    download(k_gpu, k.device);
    expect_same_append(k_before, k_gpu, k.host);
  }

  // ---- MLA (DeepSeek-V2-Lite): the fused MLA kernel against the float64 reference ----------
  struct LatentWeights {
    Pair wq, wkv_a, kv_a_norm, wkv_b, wo, norm;
    LatentAttentionWeights host() const {
      return {wq.host, wkv_a.host, kv_a_norm.host, wkv_b.host, wo.host, norm.host};
    }
    LatentAttentionWeights device() const {
      return {wq.device, wkv_a.device, kv_a_norm.device, wkv_b.device, wo.device, norm.device};
    }
  };
  LatentWeights latent_weights(const ModelConfig& m) {
    const int64_t h = m.num_heads, r = m.kv_lora_rank, dr = m.rope_head_dim;
    const float sh = 1.0f / std::sqrt(float(m.hidden)), sr = 1.0f / std::sqrt(float(r));
    const float so = 1.0f / std::sqrt(float(h * m.v_head_dim));
    return {random({h * (m.nope_head_dim + dr), m.hidden}, kBf16, 51, -sh, sh),
            random({r + dr, m.hidden}, kBf16, 52, -sh, sh),
            random({r}, kBf16, 53, 0.5f, 1.5f),
            random({h * (m.nope_head_dim + m.v_head_dim), r}, kBf16, 54, -sr, sr),
            random({m.hidden, h * m.v_head_dim}, kBf16, 55, -so, so),
            random({m.hidden}, kBf16, 56, 0.5f, 1.5f)};
  }

  // One MLA step on the GPU and on the reference: the output within bf16 error, the appended
  // latent rows as the reference's (one bf16 rounding), every other row untouched.
  void check_latent_step(const ModelConfig& m, const LatentWeights& w, int64_t batch, bool paged,
                         int cluster, DecodeImpl impl = DecodeImpl::kFused) {
    SCOPED_TRACE(::testing::Message() << m.name << " batch " << batch
                                      << (paged ? " paged" : " contiguous") << " cluster " << cluster
                                      << (impl == DecodeImpl::kUnfused ? " unfused" : " fused"));
    AttentionBlock block({m, batch, kMaxContext, kBf16, paged, kPageSize, Device::cuda(0), impl,
                          cluster});
    ASSERT_EQ(block.impl(), impl);
    const std::vector<int64_t> shape =
        cache_shape(paged, batch, 1, m.kv_lora_rank + m.rope_head_dim);
    Pair latent = random(shape, kBf16, 61, -1.f, 1.f);
    const Pair table = page_table(batch, 6);
    const Pair pos = ragged_positions(batch);
    Pair x = random({batch, m.hidden}, kBf16, 62, -1.f, 1.f);
    StepOutputs out = step_outputs(block, batch, m.hidden);
    const TensorView no_table{};
    const Tensor before = host_copy(latent.host);
    block.run({x.device, pos.device, out.device}, w.device(),
              KvCache{latent.device, {}, paged ? TensorView(table.device) : no_table}, out.workspace,
              stream_);
    reference_latent_attention_block(m, {x.host, pos.host, out.ref}, w.host(),
                                     {latent.host, {}, paged ? TensorView(table.host) : no_table},
                                     kPageSize);
    download(out.host, out.device);
    expect_near_reference(out.host, out.ref, batch * m.hidden);
    Tensor gpu = Tensor::empty(shape, kBf16, Device::cpu());
    download(gpu, latent.device);
    // The unfused pipeline rounds kv_a's output to bf16 before its norm and RoPE, as SGLang's
    // does: where RoPE's two terms cancel, that rounding leaves its result two bf16 steps from
    // the reference's single rounding (the fused kernel keeps the row in float32).
    expect_same_append(before, gpu, latent.host, impl == DecodeImpl::kUnfused ? 1.6e-2f : 1e-2f);
  }

  Stream stream_;
};

TEST_F(DecodeGpu, Llama2FusedMatchesReference) {
  const ModelConfig m = ModelConfig::llama2_7b();
  const Weights w = weights(m);
  for (const Case& c : pick(every_batch_and_layout({{3, true, 1}, {3, true, 2}, {3, true, 8}, {3, true, 16}}),
                            {{3, true, 0}, {16, false, 0}, {3, true, 16}}))
    check_step(m, w, c.batch, c.paged, c.cluster);
}

TEST_F(DecodeGpu, Llama3GqaFusedMatchesReference) {
  const ModelConfig m = ModelConfig::llama3_8b();
  const Weights w = weights(m);
  // Batch 40: more than one batch tile.
  for (const Case& c : pick(every_batch_and_layout({{16, false, 4}, {16, false, 8}, {40, false, 0}}),
                            {{3, true, 0}, {16, false, 8}, {40, false, 0}}))
    check_step(m, w, c.batch, c.paged, c.cluster);
}

// The unfused path's split-KV attention: the tensor-core kernels at head dims 64 and 128 (groups
// 1, 4, 7 and 16: one and two tiles of 8 query heads as the MMA columns), the CUDA-core kernel
// at 256; at the short context every split is at most two 64-token tiles, at the long one
// (positions up to 2040) splits run many tiles through the two buffers, and splits past a short
// sequence's end hold no token.
TEST_F(DecodeGpu, UnfusedSplitKvMatchesReference) {
  // Groups over 4 at head dimension 128 take the TMA kernel's three-pipeline form (bigger merge
  // areas): Qwen2.5-7B's 28:4 heads, a group of 7; groups over 8 two tiles of 8 query heads.
  for (const ModelConfig& m : {ModelConfig::llama2_7b(), ModelConfig::llama3_8b(),
                               llama3_with_heads(32, 2, 64), llama3_with_heads(16, 4, 256),
                               llama3_with_heads(28, 4, 128), llama3_with_heads(32, 2, 128)}) {
    const Weights w = weights(m);
    for (const Case& c : pick(every_batch_and_layout({}), {{3, true, 0}, {16, false, 0}}))
      check_step(m, w, c.batch, c.paged, c.cluster, DecodeImpl::kUnfused);
    max_context_ = 2048;
    check_step(m, w, 3, true, 0, DecodeImpl::kUnfused);
    max_context_ = kMaxContext;
  }
}

// The TMA-fed kernel loads whole 16-token blocks and the cp.async one zero-fills: cache slots
// past each sequence's token (NaN here) stay out of the result, at every ragged tail.
TEST_F(DecodeGpu, UnfusedSplitKvIgnoresCacheSlotsPastTheContext) {
  for (const ModelConfig& m : {ModelConfig::llama3_8b(), llama3_with_heads(32, 2, 64)}) {
    const Weights w = weights(m);
    for (const bool paged : {true, false})
      check_step(m, w, 16, paged, 0, DecodeImpl::kUnfused, /*poison_tail=*/true);
  }
}

TEST_F(DecodeGpu, DeepSeekV2LiteMlaFusedMatchesReference) {
  const ModelConfig m = mla_model();
  const LatentWeights w = latent_weights(m);
  for (const Case& c : pick(every_batch_and_layout({{3, true, 1}, {3, true, 2}, {3, true, 4}, {3, true, 16}}),
                            {{3, true, 0}, {1, false, 2}}))
    check_latent_step(m, w, c.batch, c.paged, c.cluster);
}

// Batches 1 and 3 merge the splits by column chunks, batch 16 a CTA a (sequence, head) (256 rows,
// more than the multiprocessors of an H100 or H200).
TEST_F(DecodeGpu, DeepSeekV2LiteMlaUnfusedMatchesReference) {
  const ModelConfig m = ModelConfig::deepseek_v2_lite();
  const LatentWeights w = latent_weights(m);
  for (const Case& c : pick(every_batch_and_layout({}), {{3, true, 0}}))
    check_latent_step(m, w, c.batch, c.paged, c.cluster, DecodeImpl::kUnfused);
}

// The unfused path's attention on CUDA cores, the form for latent widths the tensor-core form
// does not take (it takes kv_lora_rank 512 and rope_head_dim 64, which the test above runs):
// kv_lora_rank 256, batch 40 (more than one batch chunk) and paged.
TEST_F(DecodeGpu, MlaCudaCoreAttentionMatchesReference) {
  ModelConfig m = mla_model();
  m.kv_lora_rank = 256;
  m.name += " (kv_lora_rank 256)";
  const LatentWeights w = latent_weights(m);
  for (const Case& c : pick(every_batch_and_layout({{40, false, 0}}), {{3, true, 0}}))
    check_latent_step(m, w, c.batch, c.paged, c.cluster, DecodeImpl::kUnfused);
}

TEST_F(DecodeGpu, GraphReplaysAreBitwiseIdentical) {
  for (const ModelConfig& m : {ModelConfig::llama2_7b(), ModelConfig::llama3_8b()}) {
    const Weights w = weights(m);
    const int64_t batch = 4;
    for (DecodeImpl impl : {DecodeImpl::kFused, DecodeImpl::kUnfused}) {
      SCOPED_TRACE(::testing::Message()
                   << m.name << (impl == DecodeImpl::kFused ? " fused" : " unfused"));
      AttentionBlock block({m, batch, kMaxContext, kBf16, false, kPageSize, Device::cuda(0), impl});
      Pair k = random({batch, kMaxContext, m.num_kv_heads, m.head_dim}, kBf16, 41, -1.f, 1.f);
      Pair v = random({batch, kMaxContext, m.num_kv_heads, m.head_dim}, kBf16, 42, -1.f, 1.f);
      expect_block_replays_bitwise(block, m, batch, w, KvCache{k.device, v.device, {}}, 43);
    }
  }
}

TEST_F(DecodeGpu, MlaGraphReplaysAreBitwiseIdentical) {
  const ModelConfig m = mla_model();
  const LatentWeights w = latent_weights(m);
  const int64_t batch = 3, width = m.kv_lora_rank + m.rope_head_dim;
  for (DecodeImpl impl : {DecodeImpl::kFused, DecodeImpl::kUnfused}) {
    SCOPED_TRACE(impl == DecodeImpl::kFused ? "fused" : "unfused");
    AttentionBlock block({m, batch, kMaxContext, kBf16, false, kPageSize, Device::cuda(0), impl});
    Pair latent = random({batch, kMaxContext, 1, width}, kBf16, 71, -1.f, 1.f);
    expect_block_replays_bitwise(block, m, batch, w, KvCache{latent.device, {}, {}}, 72);
  }
}

TEST_F(DecodeGpu, BadPlansAreRefusedWithTheArgumentsName) {
  const ModelConfig m = ModelConfig::llama2_7b();
  AttentionBlockOptions o{m, 1, 4096, kBf16, false, kPageSize, Device::cuda(0)};
  o.cluster_size = 3;
  EXPECT_THROW({
    try { AttentionBlock b(o); } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cluster_size = 3"), std::string::npos) << e.what();
      throw;
    }
  }, Error);
  o.cluster_size = 0;
  ModelConfig odd = m;
  odd.head_dim = 64;
  odd.num_heads = 64;
  odd.num_kv_heads = 64;
  o.model = odd;
  o.impl = DecodeImpl::kFused;  // kAuto would take the unfused path for head_dim 64
  EXPECT_THROW(AttentionBlock{o}, Error);
  // MLA: a cluster size that does not divide the fused kernel's cuts (576 = R + Dr by 3 does,
  // 192 does, 512 not).
  AttentionBlockOptions mla{ModelConfig::deepseek_v2_lite(), 1, 4096, kBf16, false, kPageSize,
                            Device::cuda(0), DecodeImpl::kFused, 3};
  try {
    AttentionBlock b(mla);
    ADD_FAILURE() << "no error; expected one naming cluster_size = 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cluster_size = 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::decode
