// PageAllocator (the bookkeeping PagedKvCache and LlamaGpuModel share): pages handed out lowest
// first and taken back in order, pages_to_extend matching what extend takes, truncate giving
// back the pages past the new length, a batch that does not fit taking nothing, errors naming
// the owner; and LlamaGpuModel refusing a build without
// the cuda backend.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/model/llama_gpu_model.h"
#include "tessera/model/page_allocator.h"

namespace tessera::model {
namespace {

std::string error_of(const std::function<void()>& call, ErrorCode code) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(PageAllocator, PagesGoOutLowestFirstAndComeBackInOrder) {
  PageAllocator pages(4, 6, "TestCache");
  const int64_t a = pages.add_sequence(), b = pages.add_sequence();
  EXPECT_EQ(pages.pages_to_extend(a, 5), 2);
  pages.extend(a, 5);
  EXPECT_EQ(pages.page_table(a), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(pages.pages_to_extend(a, 3), 0);  // positions 5..7 fit in page 1
  pages.extend(a, 3);
  pages.extend(b, 1);
  EXPECT_EQ(pages.page_table(b), (std::vector<int64_t>{2}));
  EXPECT_EQ(pages.length(a), 8);
  EXPECT_EQ(pages.free_pages(), 3);
  pages.release_sequence(a);
  EXPECT_FALSE(pages.contains(a));
  const int64_t c = pages.add_sequence();
  EXPECT_NE(c, a);  // ids are never reused
  pages.extend(c, 8);
  EXPECT_EQ(pages.page_table(c), (std::vector<int64_t>{0, 1}));
}

TEST(PageAllocator, TruncateGivesBackThePagesPastTheNewLength) {
  PageAllocator pages(4, 6, "TestCache");
  const int64_t a = pages.add_sequence();
  pages.extend(a, 3);
  pages.extend(a, 7);  // a failed step's 7 tokens on top of 3 cached
  EXPECT_EQ(pages.page_table(a), (std::vector<int64_t>{0, 1, 2}));
  pages.truncate(a, 3);
  EXPECT_EQ(pages.length(a), 3);
  EXPECT_EQ(pages.page_table(a), (std::vector<int64_t>{0}));
  EXPECT_EQ(pages.free_pages(), 5);
  pages.extend(a, 5);  // the step again: the same pages come back
  EXPECT_EQ(pages.page_table(a), (std::vector<int64_t>{0, 1}));
  pages.truncate(a, 0);
  EXPECT_TRUE(pages.page_table(a).empty());
  EXPECT_EQ(pages.free_pages(), 6);
  EXPECT_NE(error_of([&] { pages.truncate(a, 1); }, ErrorCode::kInvalidArgument)
                .find("TestCache::truncate: length = 1: expected 0 to the sequence's 0"),
            std::string::npos);
}

TEST(PageAllocator, RefusalsNameTheOwnerAndChangeNothing) {
  PageAllocator pages(4, 2, "TestCache");
  const int64_t a = pages.add_sequence();
  EXPECT_NE(error_of([&] { pages.extend(a, 9); }, ErrorCode::kInvalidArgument)
                .find("TestCache::extend: out of pages: sequence 0 needs 3 more page(s)"),
            std::string::npos);
  EXPECT_EQ(pages.length(a), 0);
  EXPECT_EQ(pages.free_pages(), 2);
  EXPECT_NE(error_of([&] { pages.length(7); }, ErrorCode::kInvalidArgument)
                .find("TestCache::length: seq_id = 7: no such sequence"),
            std::string::npos);
  EXPECT_NE(error_of([&] { PageAllocator bad(0, 2, "TestCache"); }, ErrorCode::kInvalidArgument)
                .find("TestCache.page_size = 0"),
            std::string::npos);
}

#ifndef TESSERA_WITH_CUDA
TEST(LlamaGpuModel, RefusesABuildWithoutTheCudaBackend) {
  DecoderConfig c;
  c.vocab_size = 64;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 64;
  EXPECT_NE(error_of([&] { LlamaGpuModel m(c, random_llama_source(1), {}, nullptr); },
                     ErrorCode::kUnsupported)
                .find("no cuda backend"),
            std::string::npos);
}
#endif

}  // namespace
}  // namespace tessera::model
