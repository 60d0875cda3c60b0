// PagedKvCache: the keys and values of every layer of one decoder stack, for many sequences, in
// fixed-size pages (vLLM's PagedAttention layout on the cpu backend, float32).
//
// A page holds `page_size` token positions of every layer: [num_layers, 2 (k, v), page_size,
// num_kv_heads, head_dim] floats. A sequence owns a page table (the pages of positions
// [i * page_size, (i + 1) * page_size) in order); its length counts the positions reserved by
// extend(), which takes the pages it needs from the free list at once or throws (nothing taken)
// when too few are free. write() then fills the new positions layer by layer.
//
// Reading: kv_chunks() gives one attention chunk per page (views into the pages, each with the
// causal mask of its positions), what attn::reference_attention folds; gather() copies a
// sequence's positions into contiguous [L, Hkv, D] buffers. Sequence ids are never reused.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/attn/attention.h"
#include "tessera/core/tensor_view.h"
#include "tessera/model/page_allocator.h"

namespace tessera::model {

struct PagedKvCacheConfig {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;  // of this rank (a tensor-parallel rank holds its share)
  int64_t head_dim = 0;
  int64_t page_size = 16;  // token positions per page
  int64_t num_pages = 0;
};

class PagedKvCache {
 public:
  // Throws kInvalidArgument naming the field when a size is < 1.
  explicit PagedKvCache(const PagedKvCacheConfig& config);

  const PagedKvCacheConfig& config() const { return config_; }
  int64_t free_pages() const { return pages_.free_pages(); }

  // The sequences and their pages (PageAllocator's contract; errors name PagedKvCache).
  int64_t add_sequence() { return pages_.add_sequence(); }
  void release_sequence(int64_t seq_id) { pages_.release_sequence(seq_id); }
  bool contains(int64_t seq_id) const { return pages_.contains(seq_id); }
  int64_t length(int64_t seq_id) const { return pages_.length(seq_id); }
  const std::vector<int64_t>& page_table(int64_t seq_id) const { return pages_.page_table(seq_id); }
  void extend(int64_t seq_id, int64_t num_tokens) { pages_.extend(seq_id, num_tokens); }
  void truncate(int64_t seq_id, int64_t length) { pages_.truncate(seq_id, length); }

  // Stores k, v [T, Hkv, D] (f32, unit stride in D) of `layer` at positions [start, start + T),
  // which must lie inside the sequence's length.
  void write(int64_t layer, int64_t seq_id, int64_t start, const TensorView& k,
             const TensorView& v);

  // The first `num_tokens` positions of `layer` as attention chunks, one per page: k and v
  // [1, rows, Hkv, D] views into the page, mask causal_at(q_start, page's first position), so
  // query i (at position q_start + i) sees the positions <= its own.
  std::vector<attn::KvChunk> kv_chunks(int64_t layer, int64_t seq_id, int64_t num_tokens,
                                       int64_t q_start) const;

  // Copies the first `num_tokens` positions of `layer` into k_out, v_out (f32 contiguous
  // [num_tokens, Hkv, D]).
  void gather(int64_t layer, int64_t seq_id, int64_t num_tokens, const TensorView& k_out,
              const TensorView& v_out) const;

 private:
  void check_range(int64_t layer, int64_t seq_id, int64_t end) const;
  // The first float of (page, layer, k or v, row 0).
  float* slot(int64_t page, int64_t layer, int kv) const;

  PagedKvCacheConfig config_;
  PageAllocator pages_;
  int64_t row_floats_ = 0;   // Hkv * D
  int64_t page_floats_ = 0;  // num_layers * 2 * page_size * row_floats_
  std::vector<float> pool_;
};

}  // namespace tessera::model
