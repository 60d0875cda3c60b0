// The cuda backend of decode::AttentionBlock: lowers a validated step to the fused kernel's
// parameters (kernels/decode/decode_launch.h) and launches it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "decode/decode_backend.h"
#include "decode/decode_launch.h"
#include "decode/mla_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::decode::detail {

int cuda_multiprocessor_count() {
  int device = 0, sms = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

std::string cuda_device_name() {
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

int cuda_max_active_clusters(const AttentionBlockOptions& o, int cluster_size) {
  const ModelConfig& m = o.model;
  if (m.kind == AttentionKind::kLatent)
    return kernels::mla_decode_max_active_clusters(
        element_of(o.dtype), int(m.hidden), int(m.kv_lora_rank), int(m.nope_head_dim),
        int(m.rope_head_dim), int(m.v_head_dim), cluster_size);
  const int group = int(o.model.group_size());
  return kernels::fused_decode_max_active_clusters(element_of(o.dtype), group,
                                                   int(std::min<int64_t>(o.max_batch, 16)),
                                                   int(o.model.hidden), cluster_size);
}

void cuda_fused_attention_block(const AttentionBlockOptions& o, int cluster_size,
                                std::span<const float> inv_freq, const DecodeStep& step, const AttentionWeights& w,
                                const KvCache& cache, const TensorView& workspace,
                                const Stream& stream) {
  kernels::FusedDecodeParams p;
  p.element = element_of(o.dtype);
  p.group = int(o.model.group_size());
  p.cluster_size = cluster_size;
  p.batch = int(step.x.size(0));
  p.hidden = int(o.model.hidden);
  p.num_heads = int(o.model.num_heads);
  p.num_kv_heads = int(o.model.num_kv_heads);
  p.x = step.x.data();
  p.input_norm = w.input_norm.empty() ? nullptr : w.input_norm.data();
  p.rms_eps = o.model.rms_norm_eps;
  p.wq = w.wq.data();
  p.wk = w.wk.data();
  p.wv = w.wv.data();
  p.wo = w.wo.data();
  p.k_cache = cache.k.data();
  p.v_cache = cache.v.data();
  set_cache_layout(cache, o.max_context, p);
  p.positions = step.positions.data_as<const int32_t>();
  p.softmax_scale = 1.0f / std::sqrt(float(o.model.head_dim));
  std::copy(inv_freq.begin(), inv_freq.end(), p.inv_freq);
  p.partial = workspace.data_as<float>();
  p.out = step.out.data();
  kernels::launch_fused_decode(p, stream.cuda_stream());
}

}  // namespace tessera::decode::detail
