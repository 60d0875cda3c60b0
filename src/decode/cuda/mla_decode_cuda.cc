// The cuda backend of decode::AttentionBlock for MLA plans: lowers a validated step to the fused
// MLA kernel's parameters (kernels/decode/mla_launch.h) and launches it.
#include <algorithm>
#include <cmath>

#include "decode/decode_backend.h"
#include "decode/mla_launch.h"
#include "tessera/core/error.h"

namespace tessera::decode::detail {

std::string cuda_mla_unsupported_reason(const ModelConfig& m) {
  const char* why = kernels::mla_decode_unsupported(int(m.hidden), int(m.kv_lora_rank),
                                                    int(m.nope_head_dim), int(m.rope_head_dim),
                                                    int(m.v_head_dim));
  return why == nullptr ? std::string{} : str("model = ", m.name, ": ", why);
}

void cuda_mla_attention_block(const AttentionBlockOptions& o, int cluster_size,
                              std::span<const float> inv_freq, const DecodeStep& step,
                              const LatentAttentionWeights& w, const KvCache& cache,
                              const TensorView& workspace, const Stream& stream) {
  const ModelConfig& m = o.model;
  kernels::MlaDecodeParams p;
  p.element = element_of(o.dtype);
  p.cluster_size = cluster_size;
  p.batch = int(step.x.size(0));
  p.hidden = int(m.hidden);
  p.num_heads = int(m.num_heads);
  p.rank = int(m.kv_lora_rank);
  p.nope = int(m.nope_head_dim);
  p.rope = int(m.rope_head_dim);
  p.v_dim = int(m.v_head_dim);
  p.x = step.x.data();
  p.input_norm = w.input_norm.empty() ? nullptr : w.input_norm.data();
  p.rms_eps = m.rms_norm_eps;
  p.wq = w.wq.data();
  p.wkv_a = w.wkv_a.data();
  p.kv_a_norm = w.kv_a_norm.data();
  p.wkv_b = w.wkv_b.data();
  p.wo = w.wo.data();
  p.cache = cache.k.data();
  set_cache_layout(cache, o.max_context, p);
  p.positions = step.positions.data_as<const int32_t>();
  p.softmax_scale = 1.0f / std::sqrt(float(m.nope_head_dim + m.rope_head_dim));
  std::copy(inv_freq.begin(), inv_freq.end(), p.inv_freq);
  p.partial = workspace.data_as<float>();
  p.out = step.out.data();
  kernels::launch_mla_decode(p, stream.cuda_stream());
}

}  // namespace tessera::decode::detail
