// PagedKvCache: positions written layer by layer read back exactly (gathered and as per-page
// attention chunks) across non-contiguous pages of interleaved sequences; attention over the
// chunks equals attention over the gathered rows; running out of pages is refused with the
// cache unchanged; bad arguments are refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tessera/attn/reference.h"
#include "tessera/core/error.h"
#include "tessera/model/paged_kv_cache.h"

namespace tessera::model {
namespace {

constexpr int64_t kLayers = 2, kHeads = 2, kDim = 3, kPage = 4;

PagedKvCacheConfig small_config(int64_t num_pages = 16) {
  return {kLayers, kHeads, kDim, kPage, num_pages};
}

// The value of (layer, kv, seq, position, head, dim), distinct for every tuple.
float value_at(int64_t layer, int kv, int64_t seq, int64_t pos, int64_t h, int64_t d) {
  return float(((((layer * 2 + kv) * 8 + seq) * 64 + pos) * kHeads + h) * kDim + d);
}

// Rows [start, start + n) of (layer, kv, seq) as [n, Hkv, D].
std::vector<float> rows_of(int64_t layer, int kv, int64_t seq, int64_t start, int64_t n) {
  std::vector<float> rows;
  for (int64_t p = start; p < start + n; ++p)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t d = 0; d < kDim; ++d) rows.push_back(value_at(layer, kv, seq, p, h, d));
  return rows;
}

TensorView view3(std::vector<float>& data, int64_t rows) {
  return TensorView(data.data(), DType::kF32, Device::cpu(), {rows, kHeads, kDim});
}

// Appends n positions to `seq` in every layer.
void append(PagedKvCache& cache, int64_t seq, int64_t n) {
  const int64_t start = cache.length(seq);
  cache.extend(seq, n);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    std::vector<float> k = rows_of(layer, 0, seq, start, n), v = rows_of(layer, 1, seq, start, n);
    cache.write(layer, seq, start, view3(k, n), view3(v, n));
  }
}

TEST(PagedKvCache, InterleavedSequencesReadBackExactly) {
  PagedKvCache cache(small_config());
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  // Interleaved growth gives each sequence pages that are not adjacent in the pool.
  append(cache, a, 5);
  append(cache, b, 3);
  append(cache, a, 1);  // decode-like: one position into a page's middle
  append(cache, b, 7);
  append(cache, a, 6);
  ASSERT_EQ(cache.length(a), 12);
  ASSERT_EQ(cache.length(b), 10);
  EXPECT_EQ(cache.page_table(a).size(), 3u);
  EXPECT_EQ(cache.page_table(b).size(), 3u);
  EXPECT_EQ(cache.free_pages(), 16 - 6);

  for (int64_t seq : {a, b}) {
    const int64_t len = cache.length(seq);
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      std::vector<float> k(size_t(len * kHeads * kDim), -1.0f), v = k;
      cache.gather(layer, seq, len, view3(k, len), view3(v, len));
      EXPECT_EQ(k, rows_of(layer, 0, seq, 0, len)) << "seq " << seq << " layer " << layer;
      EXPECT_EQ(v, rows_of(layer, 1, seq, 0, len)) << "seq " << seq << " layer " << layer;

      const auto chunks = cache.kv_chunks(layer, seq, len, /*q_start=*/len - 2);
      ASSERT_EQ(int64_t(chunks.size()), (len + kPage - 1) / kPage);
      for (size_t c = 0; c < chunks.size(); ++c) {
        const int64_t first = int64_t(c) * kPage, rows = std::min(kPage, len - first);
        EXPECT_EQ(chunks[c].k.size(1), rows);
        EXPECT_TRUE(chunks[c].mask.causal);
        EXPECT_EQ(chunks[c].mask.kv_start, first);
        EXPECT_EQ(chunks[c].mask.q_start, len - 2);
        const std::vector<float> want = rows_of(layer, 1, seq, first, rows);
        const float* got = chunks[c].v.data_as<const float>();
        EXPECT_EQ(std::vector<float>(got, got + want.size()), want) << "chunk " << c;
      }
    }
  }
}

TEST(PagedKvCache, AttentionOverPagesEqualsAttentionOverGatheredRows) {
  PagedKvCache cache(small_config());
  const int64_t seq = cache.add_sequence();
  append(cache, seq, 11);
  const int64_t len = 11, lq = 3;
  std::vector<float> q(size_t(lq * 4 * kDim));
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 7 % 13) - 6) * 0.01f;
  const TensorView q_view(q.data(), DType::kF32, Device::cpu(), {1, lq, 4, kDim});
  // Values are large; scale them down so the softmax is not one-hot.
  const float scale = 1e-3f;
  const auto paged =
      attn::reference_attention(q_view, cache.kv_chunks(1, seq, len, len - lq), scale);
  std::vector<float> k(size_t(len * kHeads * kDim)), v = k;
  cache.gather(1, seq, len, view3(k, len), view3(v, len));
  const attn::KvChunk whole{
      TensorView(k.data(), DType::kF32, Device::cpu(), {1, len, kHeads, kDim}),
      TensorView(v.data(), DType::kF32, Device::cpu(), {1, len, kHeads, kDim}),
      attn::MaskSpec::causal_at(len - lq, 0)};
  const auto gathered = attn::reference_attention(q_view, std::span(&whole, 1), scale);
  ASSERT_EQ(paged.o.size(), gathered.o.size());
  for (size_t i = 0; i < paged.o.size(); ++i)
    EXPECT_NEAR(paged.o[i], gathered.o[i], 1e-5 * (1 + std::fabs(gathered.o[i]))) << i;
}

template <typename Fn>
void expect_invalid(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(PagedKvCache, OutOfPagesIsRefusedAndLeavesTheCacheUnchanged) {
  PagedKvCache cache(small_config(/*num_pages=*/3));
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  append(cache, a, 10);  // 3 pages
  EXPECT_EQ(cache.free_pages(), 0);
  expect_invalid([&] { cache.extend(b, 1); }, {"out of pages", "sequence 1", "0 of 3"});
  EXPECT_EQ(cache.length(b), 0);
  expect_invalid([&] { cache.extend(a, 3); }, {"out of pages", "1 more page"});
  EXPECT_EQ(cache.length(a), 10);
  cache.extend(a, 2);  // fits in the last page
  EXPECT_EQ(cache.length(a), 12);
  cache.release_sequence(a);
  EXPECT_EQ(cache.free_pages(), 3);
  EXPECT_FALSE(cache.contains(a));
  append(cache, b, 12);
  EXPECT_EQ(cache.length(b), 12);
}

TEST(PagedKvCache, BadArgumentsAreNamed) {
  PagedKvCacheConfig bad = small_config();
  bad.page_size = 0;
  expect_invalid([&] { PagedKvCache c(bad); }, {"page_size = 0"});
  bad = small_config();
  bad.num_kv_heads = -1;
  expect_invalid([&] { PagedKvCache c(bad); }, {"num_kv_heads"});

  PagedKvCache cache(small_config());
  const int64_t seq = cache.add_sequence();
  cache.extend(seq, 2);
  std::vector<float> k = rows_of(0, 0, seq, 0, 3), v = k;
  expect_invalid([&] { cache.write(0, seq, 0, view3(k, 3), view3(v, 3)); },
                 {"positions up to 3", "length 2", "extend"});
  expect_invalid([&] { cache.write(2, seq, 0, view3(k, 1), view3(v, 1)); }, {"layer = 2"});
  std::vector<float> wrong(12);
  expect_invalid(
      [&] {
        cache.write(0, seq, 0, TensorView(wrong.data(), DType::kF32, Device::cpu(), {1, 4, 3}),
                    view3(v, 1));
      },
      {"write: k"});
  expect_invalid([&] { cache.extend(7, 1); }, {"seq_id = 7"});
  expect_invalid([&] { cache.kv_chunks(0, seq, 3, 0); }, {"length 2"});
}

}  // namespace
}  // namespace tessera::model
