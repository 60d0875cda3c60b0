// The plain-C++ description of one fused MLA decode launch (AttentionKind::kLatent), shared by
// the host glue (src/decode/cuda/, host compiler) and the kernel (kernels/decode/mla_sm90.cuh,
// nvcc). attention_block.h states what is computed, src/decode/split_geometry.h how it is cut
// over a cluster of CTAs per query head.
#pragma once

#include <cstdint>

#include "decode/decode_launch.h"

namespace tessera::decode::kernels {

inline constexpr int kMlaThreads = 256;
inline constexpr int kMlaBatchTile = 8;     // sequences per CTA; larger batches tile grid y
inline constexpr int kMlaMaxRopeDim = 64;   // rope_head_dim, at most (inv_freq below)
inline constexpr int kMlaMaxRowWidth = 640; // kv_lora_rank + rope_head_dim, at most (registers)
inline constexpr int kMlaHiddenAlign = 256; // hidden: a multiple (16-byte loads by 32 lanes)

struct MlaDecodeParams {
  Element element = Element::kBF16;
  int cluster_size = 1;  // CTAs per query head
  int batch = 1;
  int hidden = 0;
  int num_heads = 0;
  int rank = 0;  // kv_lora_rank R
  int nope = 0;  // Dn
  int rope = 0;  // Dr
  int v_dim = 0; // Dv
  const void* x = nullptr;           // [B, hidden]
  const void* input_norm = nullptr;  // [hidden] or nullptr
  float rms_eps = 0;
  const void* wq = nullptr;         // [H*(Dn+Dr), hidden]
  const void* wkv_a = nullptr;      // [R+Dr, hidden]
  const void* kv_a_norm = nullptr;  // [R]
  const void* wkv_b = nullptr;      // [H*(Dn+Dv), R]
  const void* wo = nullptr;         // [hidden, H*Dv]
  void* cache = nullptr;  // latent rows [R+Dr]: contiguous [B, max_context] or paged [pages, page_size]
  const int32_t* page_table = nullptr;  // [B, pages_per_seq], nullptr: contiguous
  int64_t pages_per_seq = 0;
  int64_t num_pages = 0;
  int64_t page_size = 16;
  int64_t max_context = 0;     // positions must stay below this (the plan's bound)
  int64_t context_stride = 0;  // contiguous cache: rows per sequence (cache.k.size(1))
  const int32_t* positions = nullptr;  // [B]
  float softmax_scale = 0;             // 1 / sqrt(Dn + Dr)
  float inv_freq[kMlaMaxRopeDim / 2] = {};
  float* partial = nullptr;  // workspace [H, B, hidden]: each head's output projection
  void* out = nullptr;       // [B, hidden]
};

// Byte offsets of the kernel's shared-memory regions (each 16-byte aligned), for a cluster of
// n CTAs a head.
struct MlaSmemLayout {
  int x = 0;        // T [kB][hidden]: x times the norm weight
  int rstd = 0;     // f32 [kB]
  int q = 0;        // f32 [n][kB][dq/n]: the gathered query projection
  int lat = 0;      // f32 [n][kB][(R+Dr)/n]: the gathered latent projection
  int ql = 0;       // f32 [n][kB][R/n]: the gathered absorbed query, then o_lat [kB][R]
  int row = 0;      // f32 [kB][R+Dr]: the new latent row as stored (normalized, rotated, rounded)
  int qh = 0;       // f32 [kB][Dr]: the rotated query's rope part, log2-scaled
  int part = 0;     // f32 [kB][R] o then [kB] l: this CTA's attention partial, cluster-summed
  int m = 0;        // f32 [kB]: the partial's maximum, then the cluster's
  int m_own = 0;    // f32 [kB]
  int warp = 0;     // f32 [warps][R + 2]: each warp's partial of one sequence
  int v = 0;        // f32 [kB][Dv]: the value up-projection, cluster-summed
  int scratch = 0;  // f32 [32]: block reductions
  int total = 0;
};

inline constexpr int mla_align16(int bytes) { return (bytes + 15) / 16 * 16; }

inline constexpr MlaSmemLayout mla_smem_layout(int hidden, int rank, int nope, int rope,
                                               int v_dim, int element_bytes) {
  constexpr int kB = kMlaBatchTile, kWarps = kMlaThreads / 32;
  MlaSmemLayout l;
  int at = 0;
  auto take = [&at](int bytes) {
    const int here = at;
    at += mla_align16(bytes);
    return here;
  };
  l.x = take(kB * hidden * element_bytes);
  l.rstd = take(kB * 4);
  l.q = take(kB * (nope + rope) * 4);
  l.lat = take(kB * (rank + rope) * 4);
  l.ql = take(kB * rank * 4);
  l.row = take(kB * (rank + rope) * 4);
  l.qh = take(kB * rope * 4);
  l.part = take(kB * (rank + 1) * 4);
  l.m = take(kB * 4);
  l.m_own = take(kB * 4);
  l.warp = take(kWarps * (rank + 2) * 4);
  l.v = take(kB * v_dim * 4);
  l.scratch = take(32 * 4);
  l.total = at;
  return l;
}

// Empty if the kernel takes the shape at this cluster size, else why not (names the field).
// The cluster cuts (latent_cluster_divides) are checked by the caller.
const char* mla_decode_unsupported(int hidden, int rank, int nope, int rope, int v_dim);
// How many clusters of this size can run at once on the current device (0: cannot launch).
int mla_decode_max_active_clusters(Element element, int hidden, int rank, int nope, int rope,
                                   int v_dim, int cluster_size);
// The fused kernel, then the ordered sum over heads into `out`. Neither allocates nor syncs.
void launch_mla_decode(const MlaDecodeParams& params, void* cuda_stream);

}  // namespace tessera::decode::kernels
