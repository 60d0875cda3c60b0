// PageAllocator: the bookkeeping of a paged KV cache (vLLM's PagedAttention), apart from where
// the pages live: sequences, their lengths and page tables, and the free list. PagedKvCache
// (float32 pages in host memory) and LlamaGpuModel (bf16 pages on the GPU) share it.
//
// A sequence's page table lists the pages of positions [i * page_size, (i + 1) * page_size) in
// order; its length counts the positions reserved by extend(), which takes the pages it needs
// from the free list at once or throws (nothing taken) when too few are free. Pages are handed
// out lowest first; sequence ids are never reused.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace tessera::model {

class PageAllocator {
 public:
  // Throws kInvalidArgument naming `what`.page_size / num_pages when one is < 1.
  PageAllocator(int64_t page_size, int64_t num_pages, const char* what = "PageAllocator");

  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t free_pages() const { return int64_t(free_list_.size()); }

  // A new empty sequence; returns its id.
  int64_t add_sequence();
  // Returns the sequence's pages to the free list; the id becomes unknown.
  void release_sequence(int64_t seq_id);
  bool contains(int64_t seq_id) const { return sequences_.count(seq_id) != 0; }
  int64_t length(int64_t seq_id) const;
  const std::vector<int64_t>& page_table(int64_t seq_id) const;
  // Pages the sequence needs beyond those it holds to grow by `num_tokens`.
  int64_t pages_to_extend(int64_t seq_id, int64_t num_tokens) const;

  // Reserves `num_tokens` more positions at the end of the sequence, taking pages from the
  // free list. Out of pages: throws kInvalidArgument naming the sequence, the pages it needs
  // and the pages free; nothing changes.
  void extend(int64_t seq_id, int64_t num_tokens);
  // Shortens the sequence to `length` positions (0 <= length <= its length), returning the pages
  // it no longer needs to the free list: undoes extend() when the step that extended it failed.
  void truncate(int64_t seq_id, int64_t length);

 private:
  struct Sequence {
    int64_t length = 0;
    std::vector<int64_t> pages;
  };
  const Sequence& sequence(int64_t seq_id, const char* what) const;

  const char* what_;
  int64_t page_size_ = 0, num_pages_ = 0;
  std::vector<int64_t> free_list_;  // popped from the back: lowest page first
  std::map<int64_t, Sequence> sequences_;
  int64_t next_seq_id_ = 0;
};

}  // namespace tessera::model
