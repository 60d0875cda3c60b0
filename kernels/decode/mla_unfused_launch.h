// The unfused MLA decode block's kernels (the baseline the fused MLA kernel is measured
// against, and a cross-check): the latent row's norm, RoPE and cache append; the absorbed
// query per head; split-KV attention over the latent rows, every head of a sequence reading
// each row once, with its merge; the value up-projection per head. The projections around
// them (input norm, Wq, Wkv_a, Wo) are the grouped path's RMSNorm kernel and cuBLASLt GEMMs
// (src/decode/cuda/mla_unfused_cuda.cc). Plain C++ so host glue and kernels share it.
#pragma once

#include <cstdint>

#include "decode/decode_launch.h"
#include "decode/mla_launch.h"

namespace tessera::decode::kernels {

// Latent rows the split attention stages in shared memory at a time: a split's smallest size.
inline constexpr int kMlaTileRows = 16;

struct MlaUnfusedParams {
  Element element = Element::kBF16;
  int batch = 1, num_heads = 0, rank = 0, nope = 0, rope = 0, v_dim = 0;
  void* q = nullptr;        // [B, H*(Dn+Dr)] T: each head's rope part rotated in place
  void* lat = nullptr;      // [B, R+Dr] T: the latent projection, normalized and rotated in place
  const void* kv_a_norm = nullptr;  // [R]
  float rms_eps = 0;
  const void* wkv_b = nullptr;      // [H*(Dn+Dv), R]
  void* cache = nullptr;            // latent rows, the layouts of MlaDecodeParams
  const int32_t* page_table = nullptr;
  int64_t pages_per_seq = 0, num_pages = 0, page_size = 16;
  int64_t context_stride = 0;
  const int32_t* positions = nullptr;  // [B]
  float softmax_scale = 0;             // 1 / sqrt(Dn + Dr)
  float inv_freq[kMlaMaxRopeDim / 2] = {};
  float* ql = nullptr;           // [B, H, R] f32: W_UK_h^T qn
  int splits = 1;                // token splits per sequence
  float* partial_o = nullptr;    // [B, H, splits, R] each split's o / l
  float* partial_lse = nullptr;  // [B, H, splits] log2 of each split's sum
  void* o_lat = nullptr;         // [B, H*R] T: the attention output, latent
  void* o_heads = nullptr;       // [B, H*Dv] T: W_UV_h o_lat, the input of Wo
  bool tensor_cores = false;     // the attention's tensor-core form (mla_attention_mma.cuh)
  bool merge_by_columns = false;  // the splits' merge spread over column chunks
};

// c = rmsnorm(c) * kv_a_norm and kr = rope(kr), rounded and appended to the cache at
// positions[b]; every head's query rope part rotated.
void launch_mla_latent_append(const MlaUnfusedParams& p, void* cuda_stream);
// ql = W_UK_h^T qn for every (sequence, head).
void launch_mla_absorb(const MlaUnfusedParams& p, void* cuda_stream);
// o_lat = softmax over each sequence's latent rows [0, positions[b]] (the new one appended
// above) of (ql . c + qr . kr) * scale, times c; split over `splits` CTAs per sequence, each
// reading a row once for every head, merged in split order.
void launch_mla_split_attention(const MlaUnfusedParams& p, void* cuda_stream);
// Whether the tensor-core form takes this shape (DeepSeek's: kv_lora_rank 512, rope_head_dim 64).
bool mla_attention_takes_tensor_cores(int rank, int rope);
// The tensor-core form's CTAs: per (split, sequence), one per group of 16 heads; and how many
// one multiprocessor of the current device holds at once.
int mla_attention_mma_head_groups(int num_heads);
int mla_attention_mma_ctas_per_sm();
// o_heads = W_UV_h o_lat for every (sequence, head).
void launch_mla_value_up(const MlaUnfusedParams& p, void* cuda_stream);

}  // namespace tessera::decode::kernels
