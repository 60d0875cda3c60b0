// The cpu side's view of the KV cache and of the dtype the block computes in, shared by the
// float64 reference (reference.cc) and the float32 emulation of the fused split
// (split_emulation.cc): where token t of sequence b lives, contiguous or paged, with the page
// index checked (rounding to the storage dtype is round_to_dtype, core/dtype.h).
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"

namespace tessera::decode::cpu {

// Element index of (token t of sequence b, KV head g, dim 0) in cache.k / cache.v.
inline int64_t cache_offset(const KvCache& cache, int64_t page_size, int64_t b, int64_t t,
                            int64_t g) {
  const int64_t hkv = cache.k.size(2), d = cache.k.size(3);
  int64_t row;
  if (cache.page_table.empty()) {
    row = b * cache.k.size(1) + t;
  } else {
    const int64_t slot = t / page_size;
    TESSERA_CHECK_ARG(slot < cache.page_table.size(1), "cache.page_table = ",
                      cache.page_table.to_string(), ": sequence ", b, " needs page slot ", slot);
    const int32_t page = cache.page_table.data_as<const int32_t>()[b * cache.page_table.size(1) + slot];
    TESSERA_CHECK_ARG(page >= 0 && page < cache.k.size(0), "cache.page_table[", b, "][", slot,
                      "] = ", page, ": expected a page index in [0, ", cache.k.size(0), ")");
    row = int64_t{page} * page_size + t % page_size;
  }
  return (row * hkv + g) * d;
}

// Row `row` of a [rows, cols] matrix in float.
inline void load_row(const TensorView& m, int64_t row, float* out) {
  const int64_t cols = m.size(1);
  for (int64_t c = 0; c < cols; ++c) out[c] = load_as_float(m.data(), m.dtype(), row * cols + c);
}

}  // namespace tessera::decode::cpu
