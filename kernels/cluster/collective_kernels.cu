// The cluster collectives run on their own, for the GPU tests and `tessera bench cluster`
// (collective_launch.h says what a launch computes).
#include <cuda_runtime.h>

#include <cstdint>

#include "cluster/cluster_collectives.cuh"
#include "cluster/collective_launch.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::cluster {
namespace {

constexpr int kThreads = 256;

template <typename T, CollectiveOp kOp>
__device__ void run_once(T* buf, int count, DsmemPeers peers) {
  if constexpr (kOp == CollectiveOp::kReduceSum) all_reduce(buf, count, SumOp{}, peers);
  if constexpr (kOp == CollectiveOp::kReduceMax) all_reduce(buf, count, MaxOp{}, peers);
  if constexpr (kOp == CollectiveOp::kGather) all_gather(buf, count, peers);
}
template <typename T, CollectiveOp kOp>
__device__ void run_once(T* buf, int count, GlobalPeers peers) {
  if constexpr (kOp == CollectiveOp::kReduceSum) all_reduce(buf, count, SumOp{}, peers);
  if constexpr (kOp == CollectiveOp::kReduceMax) all_reduce(buf, count, MaxOp{}, peers);
  if constexpr (kOp == CollectiveOp::kGather) all_gather(buf, count, peers);
}

template <typename T, CollectiveOp kOp>
__device__ void run_once(T* buf, int count, PushReducer& reducer) {
  if constexpr (kOp == CollectiveOp::kReduceSum) reducer.all_reduce(buf, count, SumOp{});
  if constexpr (kOp == CollectiveOp::kReduceMax) reducer.all_reduce(buf, count, MaxOp{});
}

// Shared memory: the CTA's input copy [count], then (DSMEM paths) its buffer, then (push path)
// the PushReducer's mbarriers and receive slots.
template <typename T, CollectiveOp kOp, CollectivePath kPath>
__global__ void __launch_bounds__(kThreads) collective_kernel(const T* __restrict__ in,
                                                               T* __restrict__ out,
                                                               char* global_scratch, int count,
                                                               int buffer_elems, int iters) {
  extern __shared__ __align__(16) unsigned char smem[];
  const unsigned rank = cluster_rank(), n = cluster_size();
  const int64_t cta = blockIdx.x;  // = cluster * n + rank
  T* input = reinterpret_cast<T*>(smem);
  const int input_elems = (count + kVec<T> - 1) / kVec<T> * kVec<T>;
  T* buf;
  if constexpr (kPath != CollectivePath::kGlobal) {
    buf = input + input_elems;
  } else {
    buf = reinterpret_cast<T*>(global_scratch) + cta * buffer_elems;
  }
  copy_range(input, in + cta * count, 0, count);
  // A gather places the input in this rank's slot, a reduce over the whole buffer.
  T* slot = kOp == CollectiveOp::kGather ? buf + rank * count : buf;
  __syncthreads();
  const auto body = [&](auto&& peers) {
    copy_range(slot, input, 0, count);
    __syncthreads();
    for (int it = 0; it < iters; ++it) {
      run_once<T, kOp>(buf, count, peers);
      if (it + 1 < iters) {
        copy_range(slot, input, 0, count);
        __syncthreads();
      }
    }
  };
  if constexpr (kPath == CollectivePath::kDsmemPush) {
    PushReducer reducer(buf + buffer_elems, size_t(buffer_elems) * sizeof(T));
    body(reducer);
  } else if constexpr (kPath == CollectivePath::kDsmem) {
    body(DsmemPeers{});
  } else {
    char* base = global_scratch + (cta - rank) * buffer_elems * int64_t{sizeof(T)};
    body(GlobalPeers{base, buffer_elems * int64_t{sizeof(T)}, reinterpret_cast<char*>(buf)});
  }
  __syncthreads();
  copy_range(out + cta * buffer_elems, static_cast<const T*>(buf), 0, buffer_elems);
  (void)n;
}

template <typename T, CollectiveOp kOp, CollectivePath kPath>
void launch_typed(const CollectiveLaunch& l, cudaStream_t stream) {
  auto kernel = collective_kernel<T, kOp, kPath>;
  const size_t smem = collective_smem_bytes(l);
  TESSERA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  if (l.cluster_size > 8)
    TESSERA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(l.num_clusters * l.cluster_size);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = l.cluster_size;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  const int buffer_elems = int(collective_buffer_bytes(l) / sizeof(T));
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<const T*>(l.in),
                                        static_cast<T*>(l.out),
                                        static_cast<char*>(l.global_scratch), l.count,
                                        buffer_elems, l.iters));
}

template <typename T, CollectiveOp kOp>
void launch_path(const CollectiveLaunch& l, cudaStream_t s) {
  switch (l.path) {
    case CollectivePath::kDsmem:
      return launch_typed<T, kOp, CollectivePath::kDsmem>(l, s);
    case CollectivePath::kGlobal:
      return launch_typed<T, kOp, CollectivePath::kGlobal>(l, s);
    case CollectivePath::kDsmemPush:
      // Gather has no push form (refused by collective_unlaunchable_reason).
      if constexpr (kOp != CollectiveOp::kGather)
        launch_typed<T, kOp, CollectivePath::kDsmemPush>(l, s);
      return;
  }
}

template <typename T>
void launch_op(const CollectiveLaunch& l, cudaStream_t s) {
  switch (l.op) {
    case CollectiveOp::kReduceSum: return launch_path<T, CollectiveOp::kReduceSum>(l, s);
    case CollectiveOp::kReduceMax: return launch_path<T, CollectiveOp::kReduceMax>(l, s);
    case CollectiveOp::kGather: return launch_path<T, CollectiveOp::kGather>(l, s);
  }
}

}  // namespace

size_t collective_element_bytes(CollectiveElement element) {
  return element == CollectiveElement::kF32 ? 4 : 2;
}

size_t collective_buffer_bytes(const CollectiveLaunch& l) {
  const size_t elems = l.op == CollectiveOp::kGather ? size_t(l.count) * l.cluster_size : l.count;
  return (elems * collective_element_bytes(l.element) + 15) / 16 * 16;
}

size_t collective_smem_bytes(const CollectiveLaunch& l) {
  const size_t buffer = collective_buffer_bytes(l);
  const size_t input = (l.count * collective_element_bytes(l.element) + 15) / 16 * 16;
  switch (l.path) {
    case CollectivePath::kDsmem:
      return input + buffer;
    case CollectivePath::kGlobal:
      return input;
    case CollectivePath::kDsmemPush:
      return input + buffer + push_reduce_bytes(buffer, l.cluster_size);
  }
  return input + buffer;
}

size_t collective_scratch_bytes(const CollectiveLaunch& l) {
  return l.path == CollectivePath::kGlobal
             ? collective_buffer_bytes(l) * l.cluster_size * l.num_clusters
             : 0;
}

std::string collective_unlaunchable_reason(const CollectiveLaunch& l) {
  if (l.cluster_size < 1 || l.cluster_size > 16)
    return str("cluster_size = ", l.cluster_size, ": expected 1 to 16");
  if (l.count < 1) return str("count = ", l.count, ": expected at least 1 element");
  int device = 0, max_smem = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(
      cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (l.path == CollectivePath::kDsmemPush && l.op == CollectiveOp::kGather)
    return "op = gather on the push path: expected a reduce (the push form reduces only)";
  const size_t smem = collective_smem_bytes(l);
  if (smem > size_t(max_smem))
    return str("the collective needs ", smem, " bytes of shared memory per CTA; the device has ",
               max_smem);
  return {};
}

void launch_collective(const CollectiveLaunch& l, void* cuda_stream) {
  const std::string why = collective_unlaunchable_reason(l);
  TESSERA_CHECK(why.empty(), ErrorCode::kUnsupported, "cluster collective: ", why);
  auto s = static_cast<cudaStream_t>(cuda_stream);
  switch (l.element) {
    case CollectiveElement::kF32: launch_op<float>(l, s); break;
    case CollectiveElement::kBF16: launch_op<__nv_bfloat16>(l, s); break;
    case CollectiveElement::kF16: launch_op<__half>(l, s); break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cluster
