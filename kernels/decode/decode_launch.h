// The plain-C++ description of one fused decode attention-block launch, shared by the host
// glue (src/decode/cuda/, host compiler) and the kernels (kernels/decode/*.cu, nvcc).
// attention_block.h states what is computed; decode_sm90.cuh how.
#pragma once

#include <cstdint>

#include "decode/fused_layout.h"

namespace tessera::decode::kernels {

enum class Element : int { kBF16 = 0, kF16 = 1 };

inline constexpr int kHeadDim = kFusedHeadDim;  // the head dimension the fused kernel takes
inline constexpr int kMaxBatchTile = 16;    // sequences per CTA; larger batches tile over grid y
inline constexpr int kHiddenAlign = 128;    // hidden / cluster_size must be a multiple of this
inline constexpr int kMaxHiddenSlice = 4096;  // and at most this (the x slice is in shared memory)

struct FusedDecodeParams {
  Element element = Element::kBF16;
  int group = 1;         // query heads per KV head
  int cluster_size = 1;  // CTAs per KV head
  int batch = 1;
  int hidden = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  const void* x = nullptr;           // [B, hidden]
  const void* input_norm = nullptr;  // [hidden] or nullptr
  float rms_eps = 0;
  const void* wq = nullptr;  // [Hq*D, hidden]
  const void* wk = nullptr;  // [Hkv*D, hidden]
  const void* wv = nullptr;  // [Hkv*D, hidden]
  const void* wo = nullptr;  // [hidden, Hq*D]
  void* k_cache = nullptr;   // contiguous [B, max_context, Hkv, D] or paged [pages, page_size, Hkv, D]
  void* v_cache = nullptr;
  const int32_t* page_table = nullptr;  // [B, pages_per_seq], nullptr: contiguous
  int64_t pages_per_seq = 0;
  int64_t num_pages = 0;
  int64_t page_size = 16;
  int64_t max_context = 0;     // positions must stay below this (the plan's bound)
  int64_t context_stride = 0;  // contiguous cache: rows per sequence (cache.k.size(1))
  const int32_t* positions = nullptr;  // [B]
  float softmax_scale = 0;
  float inv_freq[kHeadDim / 2] = {};
  float* partial = nullptr;  // workspace [Hkv, B, hidden]: each cluster's output projection
  void* out = nullptr;       // [B, hidden]
};


// Sequences per CTA (the kernel's batch tile): 8, or 16 for batches above 8 when the group is
// below 8 (the group-8 kernel has no room for 16).
inline int fused_decode_batch_tile(int group, int batch) { return batch > 8 && group < 8 ? 16 : 8; }

// Whether a kernel exists for the group size (1, 2, 4, 8).
bool fused_decode_group_supported(int group);
// Dynamic shared memory of the fused kernel for a group size, batch and cluster size.
inline int fused_decode_smem_bytes(int group, int batch, int hidden, int cluster_size) {
  return fused_smem_layout(group, fused_decode_batch_tile(group, batch), hidden / cluster_size).total;
}
// Shared memory one CTA may have on sm90.
inline constexpr int kMaxSmemBytes = 227 * 1024;
// How many clusters of this size can run at once on the current device (0: cannot launch).
int fused_decode_max_active_clusters(Element element, int group, int batch, int hidden,
                                     int cluster_size);
// The fused kernel, then the ordered sum over clusters into `out` (programmatic dependent
// launch, so the second kernel's launch overlaps the first). Neither allocates nor syncs.
void launch_fused_decode(const FusedDecodeParams& params, void* cuda_stream);

}  // namespace tessera::decode::kernels
