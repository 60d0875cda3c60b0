// The MLA attention block of one decode step (AttentionKind::kLatent; attention_block.h states
// the math) computed plainly in float64 with the absorbed weights: the cpu backend's MLA path
// and what the fused MLA kernel will be checked against. Same conventions as reference.h: only
// the values a model stores are rounded to the dtype, the new latent row appended to the cache
// (and then attended as stored) and the output. RoPE is unscaled (yarn is not modelled).
// Tensors on the cpu.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/decode/attention_block.h"

namespace tessera::decode {

// Appends the new latent rows [c, kr] to cache.k at positions[b] and returns the block's output
// [B][hidden] in float64, before rounding to out's dtype (step.out is not written). positions
// must already be checked against the cache's capacity; page indices are checked here.
std::vector<double> latent_reference_output(const ModelConfig& model, const DecodeStep& step,
                                            const LatentAttentionWeights& weights,
                                            const KvCache& cache, int64_t page_size);

// The same, writing step.out in its own dtype (f32 keeps the reference nearly unrounded).
void reference_latent_attention_block(const ModelConfig& model, const DecodeStep& step,
                                      const LatentAttentionWeights& weights, const KvCache& cache,
                                      int64_t page_size);

}  // namespace tessera::decode
