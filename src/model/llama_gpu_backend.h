// Internal: the pieces of LlamaGpuModel that need CUDA itself (src/model/cuda/llama_gpu_cuda.cc,
// built only with TESSERA_CUDA=ON): split-KV decode attention over the paged cache and CUDA
// graph capture and replay.
#pragma once

#include <cstdint>
#include <functional>

#include "tessera/core/dtype.h"
#include "tessera/runtime/stream.h"

namespace tessera::model::detail {

// Attention of `batch` decode queries (one token each) over their paged caches; the layout of
// decode::KvCache's paged case (kernels/decode/unfused_launch.h).
struct SplitKvAttention {
  DType dtype = DType::kBF16;
  int batch = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  const void* q = nullptr;   // [batch] rows of q_stride elements, heads [Hq, D] at the start
  int64_t q_stride = 0;
  const void* k_cache = nullptr;  // [num_pages, page_size, Hkv, D]
  const void* v_cache = nullptr;
  const int32_t* page_table = nullptr;  // [batch, pages_per_seq]
  int64_t pages_per_seq = 0, num_pages = 0, page_size = 0;
  const int32_t* positions = nullptr;   // [batch] the new token's position (it is cached)
  float softmax_scale = 0;
  int splits = 1;
  int sm_limit = 0;              // multiprocessors it may take (0: all)
  float* partial_o = nullptr;    // [batch, Hq, splits, D]
  float* partial_lse = nullptr;  // [batch, Hq, splits]
  void* o = nullptr;             // [batch, Hq * D] contiguous
};

#ifdef TESSERA_WITH_CUDA
void cuda_split_kv_attention(const SplitKvAttention& args, const Stream& stream);
// Whether the split-KV kernel takes head_dim with `group` query heads per KV head.
bool cuda_split_kv_supported(int head_dim, int group);
// How many of its CTAs fit on a multiprocessor at once (on the current device).
int cuda_split_kv_ctas_per_multiprocessor(DType dtype, int head_dim, int group);
int cuda_sm_count(int device);

// A captured sequence of work on one stream, replayed with its arguments as they were.
class CudaGraph {
 public:
  // Runs `body` with `stream` capturing, then instantiates the graph.
  CudaGraph(const Stream& stream, const std::function<void()>& body);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void replay(const Stream& stream) const;

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};
#endif

}  // namespace tessera::model::detail
