// Host launcher of the cluster collectives on their own (kernels/cluster/cluster_collectives.cuh):
// what the GPU tests check bit for bit and `tessera bench cluster` times (the paper's Table 1,
// DSMEM against global memory). Plain C++; the kernels are in collective_kernels.cu.
//
// One launch runs num_clusters clusters of cluster_size CTAs. CTA r of cluster c loads its
// input, then runs the collective `iters` times (each time from a fresh copy of its input, so
// sums do not grow), then stores its buffer:
//   reduce: in, out [num_clusters][cluster_size][count]   (out: the reduction, on every CTA)
//   gather: in [num_clusters][cluster_size][count], out [num_clusters][cluster_size][cluster_size * count]
// Timing `iters` = k against `iters` = 0 gives the time of k collectives without the launch.
#pragma once

#include <cstddef>
#include <string>

namespace tessera::cluster {

enum class CollectiveOp { kReduceSum, kReduceMax, kGather };
// kDsmemPush: PushReducer (reduce only).
enum class CollectivePath { kDsmem, kGlobal, kDsmemPush };
enum class CollectiveElement { kF32, kBF16, kF16 };

struct CollectiveLaunch {
  CollectiveOp op = CollectiveOp::kReduceSum;
  CollectivePath path = CollectivePath::kDsmem;
  CollectiveElement element = CollectiveElement::kF32;
  int cluster_size = 1;  // 1 to 16
  int count = 1;         // elements of each CTA's input
  int num_clusters = 1;
  int iters = 1;
  const void* in = nullptr;
  void* out = nullptr;
  void* global_scratch = nullptr;  // path kGlobal: collective_scratch_bytes() of device memory
};

size_t collective_element_bytes(CollectiveElement element);
// Bytes of the buffer each CTA reduces or gathers into.
size_t collective_buffer_bytes(const CollectiveLaunch& launch);
size_t collective_scratch_bytes(const CollectiveLaunch& launch);
// Dynamic shared memory of one CTA of the launch.
size_t collective_smem_bytes(const CollectiveLaunch& launch);
// Empty if the device can run the launch, else why not (cluster size, shared memory).
std::string collective_unlaunchable_reason(const CollectiveLaunch& launch);
// Throws tessera::Error (kUnsupported with the reason, or kCuda).
void launch_collective(const CollectiveLaunch& launch, void* cuda_stream);

}  // namespace tessera::cluster
