// The fused decode kernel's dataflow emulated in float32 on the cpu: split over the CTAs of a
// cluster (split_geometry.h) and merged in the kernel's order, so CI checks the algorithm the
// GPU runs. Tensors on the cpu; writes step.out and appends the new K/V to the cache.
#pragma once

#include <cstdint>

#include "tessera/decode/attention_block.h"

namespace tessera::decode {

void split_attention_block(const ModelConfig& model, const DecodeStep& step,
                           const AttentionWeights& weights, const KvCache& cache,
                           int64_t page_size, int cluster_size);

// The same for an MLA block (split_geometry.h's latent dataflow, latent_split_emulation.cc).
// cluster_size must pass latent_cluster_divides.
void split_latent_attention_block(const ModelConfig& model, const DecodeStep& step,
                                  const LatentAttentionWeights& weights, const KvCache& cache,
                                  int64_t page_size, int cluster_size);

}  // namespace tessera::decode
