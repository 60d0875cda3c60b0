#include "tessera/model/paged_kv_cache.h"

#include <cstring>

#include "tessera/core/error.h"

namespace tessera::model {

PagedKvCache::PagedKvCache(const PagedKvCacheConfig& config)
    : config_(config), pages_(config.page_size, config.num_pages, "PagedKvCache") {
  const auto check_positive = [](int64_t value, const char* field) {
    TESSERA_CHECK_ARG(value >= 1, "PagedKvCacheConfig.", field, " = ", value, ": expected >= 1");
  };
  check_positive(config.num_layers, "num_layers");
  check_positive(config.num_kv_heads, "num_kv_heads");
  check_positive(config.head_dim, "head_dim");
  row_floats_ = config.num_kv_heads * config.head_dim;
  page_floats_ = config.num_layers * 2 * config.page_size * row_floats_;
  pool_.assign(size_t(config.num_pages * page_floats_), 0.0f);
}

void PagedKvCache::write(int64_t layer, int64_t seq_id, int64_t start, const TensorView& k,
                         const TensorView& v) {
  const std::vector<int64_t>& pages = pages_.page_table(seq_id);
  for (const auto& [t, what] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    TESSERA_CHECK_ARG(
        t->ndim() == 3 && t->size(1) == config_.num_kv_heads && t->size(2) == config_.head_dim &&
            t->stride(2) == 1 && t->dtype() == DType::kF32 && !t->device().is_cuda(),
        "PagedKvCache::write: ", what, " = ", t->to_string(), ": expected cpu f32 [T, ",
        config_.num_kv_heads, ", ", config_.head_dim, "] with unit stride in D");
  }
  TESSERA_CHECK_ARG(v.size(0) == k.size(0), "PagedKvCache::write: v has ", v.size(0),
                    " rows, k has ", k.size(0));
  TESSERA_CHECK_ARG(start >= 0, "PagedKvCache::write: start = ", start, ": expected >= 0");
  check_range(layer, seq_id, start + k.size(0));
  const int64_t heads = config_.num_kv_heads, dim = config_.head_dim;
  for (int64_t t = 0; t < k.size(0); ++t) {
    const int64_t pos = start + t;
    const int64_t page = pages[size_t(pos / config_.page_size)];
    const int64_t row = pos % config_.page_size;
    for (int kv = 0; kv < 2; ++kv) {
      const TensorView& src = kv == 0 ? k : v;
      float* dst = slot(page, layer, kv) + row * row_floats_;
      for (int64_t h = 0; h < heads; ++h) {
        const float* from = src.data_as<const float>() + t * src.stride(0) + h * src.stride(1);
        std::memcpy(dst + h * dim, from, size_t(dim) * sizeof(float));
      }
    }
  }
}

std::vector<attn::KvChunk> PagedKvCache::kv_chunks(int64_t layer, int64_t seq_id,
                                                   int64_t num_tokens, int64_t q_start) const {
  const std::vector<int64_t>& pages = pages_.page_table(seq_id);
  check_range(layer, seq_id, num_tokens);
  std::vector<attn::KvChunk> chunks;
  const Device cpu = Device::cpu();
  for (int64_t first = 0; first < num_tokens; first += config_.page_size) {
    const int64_t page = pages[size_t(first / config_.page_size)];
    const int64_t rows = std::min(config_.page_size, num_tokens - first);
    const int64_t heads = config_.num_kv_heads, dim = config_.head_dim;
    chunks.push_back({TensorView(slot(page, layer, 0), DType::kF32, cpu, {1, rows, heads, dim}),
                      TensorView(slot(page, layer, 1), DType::kF32, cpu, {1, rows, heads, dim}),
                      attn::MaskSpec::causal_at(q_start, first)});
  }
  return chunks;
}

void PagedKvCache::gather(int64_t layer, int64_t seq_id, int64_t num_tokens,
                          const TensorView& k_out, const TensorView& v_out) const {
  const std::vector<int64_t>& pages = pages_.page_table(seq_id);
  check_range(layer, seq_id, num_tokens);
  for (const auto& [t, what] : {std::pair{&k_out, "k_out"}, std::pair{&v_out, "v_out"}}) {
    TESSERA_CHECK_ARG(t->dtype() == DType::kF32 && !t->device().is_cuda() && t->is_contiguous() &&
                          t->numel() == num_tokens * row_floats_,
                      "PagedKvCache::gather: ", what, " = ", t->to_string(),
                      ": expected cpu f32 contiguous [", num_tokens, ", ", config_.num_kv_heads,
                      ", ", config_.head_dim, "]");
  }
  for (int64_t pos = 0; pos < num_tokens; ++pos) {
    const int64_t page = pages[size_t(pos / config_.page_size)];
    const int64_t row = pos % config_.page_size;
    for (int kv = 0; kv < 2; ++kv) {
      float* dst = (kv == 0 ? k_out : v_out).data_as<float>() + pos * row_floats_;
      std::memcpy(dst, slot(page, layer, kv) + row * row_floats_,
                  size_t(row_floats_) * sizeof(float));
    }
  }
}

void PagedKvCache::check_range(int64_t layer, int64_t seq_id, int64_t end) const {
  const int64_t length = pages_.length(seq_id);
  TESSERA_CHECK_ARG(layer >= 0 && layer < config_.num_layers, "PagedKvCache: layer = ", layer,
                    ": expected in [0, ", config_.num_layers, ")");
  TESSERA_CHECK_ARG(end >= 0 && end <= length, "PagedKvCache: positions up to ", end,
                    " of sequence ", seq_id, ": expected <= its length ", length,
                    " (extend() it first)");
}

float* PagedKvCache::slot(int64_t page, int64_t layer, int kv) const {
  const int64_t offset = page * page_floats_ + (layer * 2 + kv) * config_.page_size * row_floats_;
  // Views handed out by const readers point into the pool; the pool itself never reallocates.
  return const_cast<float*>(pool_.data()) + offset;
}

}  // namespace tessera::model
