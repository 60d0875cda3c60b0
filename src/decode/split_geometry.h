// How the fused decode dataflow splits one KV group's work over the N CTAs of its cluster.
// Shared by the cuda kernel (kernels/decode/) and the cpu emulation of the same split
// (split_emulation.cc), so both cut at the same places.
//
//   QKV projection:    CTA r reduces the hidden slice  [r*hidden/N, (r+1)*hidden/N)
//   attention:         CTA r reads cached tokens       seq_slice(p_b, N, r) of sequence b;
//                      CTA N-1 also folds the new token (position p_b), which is not read
//                      back from the cache
//   output projection: CTA r computes output rows      [r*hidden/N, (r+1)*hidden/N)
#pragma once

#include <cstdint>

#ifndef TESSERA_HOST_DEVICE
#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif
#endif

namespace tessera::decode {

// Sequence slices start on multiples of this many tokens (a page of the paged cache).
inline constexpr int64_t kSeqSliceAlign = 16;

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  TESSERA_HOST_DEVICE int64_t size() const { return end - begin; }
};

// hidden % n == 0 (the plan checks).
TESSERA_HOST_DEVICE inline Range hidden_slice(int64_t hidden, int n, int r) {
  const int64_t per = hidden / n;
  return {r * per, (r + 1) * per};
}

// The cached tokens [0, cached) split into n slices of a multiple of kSeqSliceAlign tokens;
// trailing slices may be empty.
TESSERA_HOST_DEVICE inline Range seq_slice(int64_t cached, int n, int r) {
  int64_t chunk = (cached + n - 1) / n;
  chunk = (chunk + kSeqSliceAlign - 1) / kSeqSliceAlign * kSeqSliceAlign;
  const int64_t begin = r * chunk < cached ? r * chunk : cached;
  const int64_t end = begin + chunk < cached ? begin + chunk : cached;
  return {begin, end};
}

// The CTA that folds the new token into its attention partial.
TESSERA_HOST_DEVICE inline int new_token_rank(int n) { return n - 1; }

}  // namespace tessera::decode
