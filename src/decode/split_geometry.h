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

// Slice r of n equal slices of [0, width); width % n == 0 (the plan checks).
TESSERA_HOST_DEVICE inline Range even_slice(int64_t width, int n, int r) {
  const int64_t per = width / n;
  return {r * per, (r + 1) * per};
}

TESSERA_HOST_DEVICE inline Range hidden_slice(int64_t hidden, int n, int r) {
  return even_slice(hidden, n, r);
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

// MLA (AttentionKind::kLatent), the ClusterFusion appendix's dataflow: one cluster of N CTAs per
// query head. Every CTA reads the whole input row; CTA r
//   projections:  computes rows even_slice(Dn + Dr, N, r) of its head's query and
//                 even_slice(R + Dr, N, r) of the latent row [c, kr] (each over all of hidden);
//                 ClusterGather gives every CTA both whole
//   latent norm:  sums the squares of c over even_slice(R, N, r); ClusterReduce adds the sums
//   absorption:   computes entries even_slice(R, N, r) of ql = W_UK_h^T qn; ClusterGather
//   attention:    as above (seq_slice, new_token_rank), partials merged by ClusterReduce
//   value up:     W_UV_h's columns even_slice(R, N, r) times the attention output's entries;
//                 ClusterReduce adds the partials
//   output:       rows hidden_slice(hidden, N, r) of Wo's columns of the head: a per-head
//                 partial, added over the heads in head order
// so every width it cuts must divide by N.
TESSERA_HOST_DEVICE inline bool latent_cluster_divides(int64_t hidden, int64_t kv_lora_rank,
                                                       int64_t nope_head_dim,
                                                       int64_t rope_head_dim, int n) {
  return n >= 1 && hidden % n == 0 && kv_lora_rank % n == 0 &&
         (nope_head_dim + rope_head_dim) % n == 0 && (kv_lora_rank + rope_head_dim) % n == 0;
}

}  // namespace tessera::decode
