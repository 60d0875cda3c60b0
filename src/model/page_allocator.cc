#include "tessera/model/page_allocator.h"

#include "tessera/core/error.h"

namespace tessera::model {

PageAllocator::PageAllocator(int64_t page_size, int64_t num_pages, const char* what)
    : what_(what), page_size_(page_size), num_pages_(num_pages) {
  TESSERA_CHECK_ARG(page_size >= 1, what, ".page_size = ", page_size, ": expected >= 1");
  TESSERA_CHECK_ARG(num_pages >= 1, what, ".num_pages = ", num_pages, ": expected >= 1");
  free_list_.reserve(size_t(num_pages));
  for (int64_t page = num_pages - 1; page >= 0; --page) free_list_.push_back(page);
}

int64_t PageAllocator::add_sequence() {
  const int64_t id = next_seq_id_++;
  sequences_.emplace(id, Sequence{});
  return id;
}

void PageAllocator::release_sequence(int64_t seq_id) {
  const Sequence& seq = sequence(seq_id, "release_sequence");
  // Pages go back in reverse so the next sequence takes them in the same order.
  for (auto it = seq.pages.rbegin(); it != seq.pages.rend(); ++it) free_list_.push_back(*it);
  sequences_.erase(seq_id);
}

int64_t PageAllocator::length(int64_t seq_id) const { return sequence(seq_id, "length").length; }

const std::vector<int64_t>& PageAllocator::page_table(int64_t seq_id) const {
  return sequence(seq_id, "page_table").pages;
}

int64_t PageAllocator::pages_to_extend(int64_t seq_id, int64_t num_tokens) const {
  const Sequence& seq = sequence(seq_id, "pages_to_extend");
  const int64_t pages_needed = (seq.length + num_tokens + page_size_ - 1) / page_size_;
  return pages_needed > int64_t(seq.pages.size()) ? pages_needed - int64_t(seq.pages.size()) : 0;
}

void PageAllocator::extend(int64_t seq_id, int64_t num_tokens) {
  sequence(seq_id, "extend");
  TESSERA_CHECK_ARG(num_tokens >= 0, what_, "::extend: num_tokens = ", num_tokens,
                    ": expected >= 0");
  Sequence& seq = sequences_.at(seq_id);
  const int64_t new_length = seq.length + num_tokens;
  const int64_t more = pages_to_extend(seq_id, num_tokens);
  TESSERA_CHECK_ARG(more <= free_pages(), what_, "::extend: out of pages: sequence ", seq_id,
                    " needs ", more, " more page(s) of ", page_size_, " positions for length ",
                    new_length, ", but ", free_pages(), " of ", num_pages_, " are free");
  for (int64_t i = 0; i < more; ++i) {
    seq.pages.push_back(free_list_.back());
    free_list_.pop_back();
  }
  seq.length = new_length;
}

void PageAllocator::truncate(int64_t seq_id, int64_t length) {
  sequence(seq_id, "truncate");
  Sequence& seq = sequences_.at(seq_id);
  TESSERA_CHECK_ARG(length >= 0 && length <= seq.length, what_, "::truncate: length = ", length,
                    ": expected 0 to the sequence's ", seq.length);
  const size_t keep = size_t((length + page_size_ - 1) / page_size_);
  while (seq.pages.size() > keep) {
    free_list_.push_back(seq.pages.back());
    seq.pages.pop_back();
  }
  seq.length = length;
}

const PageAllocator::Sequence& PageAllocator::sequence(int64_t seq_id, const char* what) const {
  const auto it = sequences_.find(seq_id);
  TESSERA_CHECK_ARG(it != sequences_.end(), what_, "::", what, ": seq_id = ", seq_id,
                    ": no such sequence");
  return it->second;
}

}  // namespace tessera::model
