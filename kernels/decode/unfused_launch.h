// The unfused decode attention block's kernels (the baseline, the fallback for shapes the
// fused kernel does not take, and a cross-check): RMSNorm; RoPE of q and k with the append of
// k and v to the cache; split-KV ("FlashDecoding") attention over the cache with its merge.
// The projections between them are cuBLASLt GEMMs (src/decode/cuda/unfused_decode_cuda.cc).
// Plain C++ so host glue and kernels share it.
#pragma once

#include <cstdint>

#include "decode/decode_launch.h"

namespace tessera::decode::kernels {

struct UnfusedDecodeParams {
  Element element = Element::kBF16;
  int batch = 1, hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  const void* x = nullptr;           // [B, hidden]
  const void* input_norm = nullptr;  // [hidden] or nullptr
  float rms_eps = 0;
  void* xn = nullptr;                // [B, hidden] the normalized input
  void* q = nullptr;                 // [B, Hq*D]   rotated in place
  int64_t q_stride = 0;              // elements from one sequence's q to the next (0: Hq*D);
                                     // read by launch_split_kv_attention only
  void* k = nullptr;                 // [B, Hkv*D]  rotated in place, then appended
  void* v = nullptr;                 // [B, Hkv*D]  appended
  void* k_cache = nullptr;           // the cache layouts of FusedDecodeParams
  void* v_cache = nullptr;
  const int32_t* page_table = nullptr;
  int64_t pages_per_seq = 0, num_pages = 0, page_size = 16;
  int64_t context_stride = 0;          // contiguous cache: rows per sequence (cache.k.size(1))
  const int32_t* positions = nullptr;  // [B]
  float softmax_scale = 0;
  float inv_freq[kHeadDim] = {};       // head_dim / 2 used (head_dim <= 2 * kHeadDim)
  int splits = 1;                      // KV splits per (sequence, KV head)
  int sm_limit = 0;                    // multiprocessors the split-KV attention may take (0:
                                       // all): the TMA kernel's persistent grid; the cp.async
                                       // kernels (other shapes) take what is free
  float* partial_o = nullptr;          // [B, Hq, splits, D]
  float* partial_lse = nullptr;        // [B, Hq, splits]
  void* o = nullptr;                   // [B, Hq*D] the attention output
};

// head_dim 64, 128 or 256 and any query heads per KV head up to 16.
bool unfused_decode_supported(int head_dim, int group);
// xn = rmsnorm(x) * input_norm (or a copy of x when there is no norm).
void launch_rmsnorm(const UnfusedDecodeParams& p, void* cuda_stream);
// q, k rotated; k and v written to the cache at positions[b].
void launch_rope_append(const UnfusedDecodeParams& p, void* cuda_stream);
// o = attention of q over each sequence's cache [0, positions[b]], split over `splits` CTAs
// per (sequence, KV head) and merged in split order.
void launch_split_kv_attention(const UnfusedDecodeParams& p, void* cuda_stream);
// How many CTAs of launch_split_kv_attention's kernel for these shapes fit on a multiprocessor
// at once (the wave the split rule, src/decode/split_kv_rule.h, fills).
int split_kv_ctas_per_multiprocessor(Element element, int head_dim, int group);

}  // namespace tessera::decode::kernels
