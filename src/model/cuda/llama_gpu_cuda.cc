// The CUDA pieces of LlamaGpuModel (llama_gpu_backend.h).
#include <cuda_runtime.h>

#include "decode/unfused_launch.h"
#include "model/llama_gpu_backend.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::model::detail {

void cuda_split_kv_attention(const SplitKvAttention& a, const Stream& stream) {
  namespace dk = decode::kernels;
  dk::UnfusedDecodeParams p;
  p.element = a.dtype == DType::kF16 ? dk::Element::kF16 : dk::Element::kBF16;
  p.batch = a.batch;
  p.num_heads = a.num_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.q = const_cast<void*>(a.q);
  p.q_stride = a.q_stride;
  p.k_cache = const_cast<void*>(a.k_cache);
  p.v_cache = const_cast<void*>(a.v_cache);
  p.page_table = a.page_table;
  p.pages_per_seq = a.pages_per_seq;
  p.num_pages = a.num_pages;
  p.page_size = a.page_size;
  p.positions = a.positions;
  p.softmax_scale = a.softmax_scale;
  p.splits = a.splits;
  p.sm_limit = a.sm_limit;
  p.partial_o = a.partial_o;
  p.partial_lse = a.partial_lse;
  p.o = a.o;
  dk::launch_split_kv_attention(p, stream.cuda_stream());
}

bool cuda_split_kv_supported(int head_dim, int group) {
  return decode::kernels::unfused_decode_supported(head_dim, group);
}

int cuda_split_kv_ctas_per_multiprocessor(DType dtype, int head_dim, int group) {
  namespace dk = decode::kernels;
  return dk::split_kv_ctas_per_multiprocessor(
      dtype == DType::kF16 ? dk::Element::kF16 : dk::Element::kBF16, head_dim, group);
}

int cuda_sm_count(int device) {
  int count = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

CudaGraph::CudaGraph(const Stream& stream, const std::function<void()>& body) {
  auto s = static_cast<cudaStream_t>(stream.cuda_stream());
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    body();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  TESSERA_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TESSERA_CUDA_CHECK(status);
  exec_ = exec;
}

CudaGraph::~CudaGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

void CudaGraph::replay(const Stream& stream) const {
  TESSERA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                     static_cast<cudaStream_t>(stream.cuda_stream())));
}

}  // namespace tessera::model::detail
