// Cluster-level collectives (ClusterFusion's ClusterReduce and ClusterGather) for the thread
// blocks of one Hopper cluster, over distributed shared memory (DSMEM) or, for comparison,
// over global memory. Device code only; kernels include this header.
//
// Every CTA of the cluster calls a collective with the same arguments (all threads of the
// CTA take part). Buffers live at the same offset in every CTA's shared memory, so a peer's
// copy is reached with map_shared_rank; the global-memory variant gives each CTA its own
// region and reaches a peer's by its rank (PeerBuffers below).
//
//   all_reduce(buf[count])   buf = op over ranks 0..N-1 of every CTA's buf, on every CTA.
//                            Up to two 16-byte vectors a thread: every CTA reduces the whole
//                            buffer (two cluster barriers). Larger: reduce-scatter then
//                            all-gather, CTA r reducing slice r and every CTA copying the
//                            reduced slices (three barriers, less DSMEM traffic). Either way
//                            each element is reduced from every peer in rank order 0, 1, ...,
//                            N-1, accumulating in f32: the result is bitwise the same on every
//                            CTA and from run to run, for any cluster size (1 to 16, powers of
//                            two or not).
//   PushReducer::all_reduce  all_reduce's result (the same bits) for small buffers with no
//                            cluster barrier per call: each CTA pushes its buffer into every
//                            peer's receive slot and waits on its own mbarrier (below).
//   all_gather(buf[N][count]) CTA r's slot buf[r] is copied into every peer's buf[r].
//   reduce_scalar(v)         one f32 per CTA (after a block reduction) combined in rank order
//                            and returned on every thread of every CTA: softmax maxima and sums,
//                            RMS sums of squares.
//
// Synchronization: each collective starts with a cluster barrier (every CTA's input is in
// place) and no CTA writes or leaves its buffer until every peer has read it (the one-phase
// all_reduce writes its result after its second barrier), so calls can follow each other on
// the same buffer. DSMEM traffic of all_reduce: every CTA reads (N-1)/N of the buffer twice
// (one-phase form: N-1 copies of it); all_gather: (N-1) slots.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tessera::cluster {

namespace cg = cooperative_groups;

struct SumOp {
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  static constexpr float kIdentity = -__builtin_huge_valf();
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Storage types: f32, bf16, f16; arithmetic is always f32.
__device__ inline float to_f32(float v) { return v; }
__device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_f32(__half v) { return __half2float(v); }
template <typename T>
__device__ inline T from_f32(float v);
template <>
__device__ inline float from_f32<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ inline __half from_f32<__half>(float v) { return __float2half_rn(v); }

// Where rank p's copy of a buffer is: in its shared memory (DSMEM), or at p * stride from a
// global base (the off-chip variant, for the paper's on-chip vs off-chip comparison).
struct DsmemPeers {
  template <typename T>
  __device__ T* operator()(T* mine, unsigned rank) const {
    return cg::this_cluster().map_shared_rank(mine, rank);
  }
  __device__ void fence() const {}
};
struct GlobalPeers {
  char* base = nullptr;         // rank 0's region of this cluster
  int64_t stride_bytes = 0;     // distance between two ranks' regions
  char* mine_base = nullptr;    // this rank's region (the `mine` pointers point into it)
  template <typename T>
  __device__ T* operator()(T* mine, unsigned rank) const {
    const int64_t offset = reinterpret_cast<char*>(mine) - mine_base;
    return reinterpret_cast<T*>(base + rank * stride_bytes + offset);
  }
  // Global writes must reach L2 before a peer reads them after the barrier.
  __device__ void fence() const { __threadfence(); }
};

__device__ inline void cluster_sync() { cg::this_cluster().sync(); }
__device__ inline unsigned cluster_rank() { return cg::this_cluster().block_rank(); }
__device__ inline unsigned cluster_size() { return cg::this_cluster().num_blocks(); }

// Peers whose vectors all_reduce has in flight at once.
inline constexpr unsigned kPeersInFlight = 4;
// Vectors a thread reduces in all_reduce's one-phase form (buffers of up to this many 16-byte
// vectors a thread skip the reduce-scatter).
inline constexpr int kOnePhaseVectors = 2;

// Elements per 16-byte vector.
template <typename T>
inline constexpr int kVec = 16 / sizeof(T);

template <typename T>
struct alignas(16) Vec {
  T v[kVec<T>];
};

// Slice of `count` elements owned by `rank` (whole vectors, so slices stay 16-byte aligned).
__device__ inline void owned_slice(int count, int vec, unsigned rank, unsigned n, int& begin,
                                   int& end) {
  const int vectors = (count + vec - 1) / vec;
  const int per = (vectors + n - 1) / n;
  begin = min(count, static_cast<int>(rank) * per * vec);
  end = min(count, begin + per * vec);
}

// Copies [begin, end) of a buffer from `src` into `dst`: 16-byte vectors and a scalar tail
// where both ends are 16-byte aligned at `begin`, else element by element.
template <typename T>
__device__ void copy_range(T* dst, const T* src, int begin, int end) {
  constexpr int V = kVec<T>;
  if (((reinterpret_cast<uintptr_t>(dst + begin) | reinterpret_cast<uintptr_t>(src + begin)) & 15) != 0) {
    for (int i = begin + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
    return;
  }
  const int full_end = begin + (end - begin) / V * V;
  for (int i = begin + threadIdx.x * V; i < full_end; i += blockDim.x * V)
    *reinterpret_cast<Vec<T>*>(dst + i) = *reinterpret_cast<const Vec<T>*>(src + i);
  for (int i = full_end + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
}

// Vector i of buf reduced over ranks 0..n-1 in rank order (f32 accumulation). Four peers'
// vectors are requested before any is added: a DSMEM round trip per four peers, not per peer.
template <typename T, typename Op, typename Peers>
__device__ Vec<T> reduce_vector(T* buf, int i, unsigned n, Op op, Peers peers) {
  constexpr int V = kVec<T>;
  float acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = Op::kIdentity;
  for (unsigned p0 = 0; p0 < n; p0 += kPeersInFlight) {
    Vec<T> x[kPeersInFlight];
#pragma unroll
    for (unsigned q = 0; q < kPeersInFlight; ++q)
      if (p0 + q < n) x[q] = *reinterpret_cast<const Vec<T>*>(peers(buf, p0 + q) + i);
#pragma unroll
    for (unsigned q = 0; q < kPeersInFlight; ++q)
      if (p0 + q < n)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = p0 + q == 0 ? to_f32(x[q].v[e]) : op(acc[e], to_f32(x[q].v[e]));
  }
  Vec<T> out;
#pragma unroll
  for (int e = 0; e < V; ++e) out.v[e] = from_f32<T>(acc[e]);
  return out;
}

// buf[count] (16-byte aligned) = op over the cluster's ranks, on every rank. See the header.
// kOnePhase false keeps to reduce-scatter + all-gather at any size: the one-phase form's
// registers can tip a caller that sits at its register limit into spilling.
template <typename T, typename Op, typename Peers = DsmemPeers, bool kOnePhase = true>
__device__ void all_reduce(T* buf, int count, Op op, Peers peers = {}) {
  constexpr int V = kVec<T>;
  const unsigned rank = cluster_rank(), n = cluster_size();
  peers.fence();
  cluster_sync();
  if (kOnePhase && count % V == 0 && count <= kOnePhaseVectors * int(blockDim.x) * V) {
    // Small buffers: every CTA reduces the whole buffer (the same rank order, so the same
    // bits everywhere), waits until every peer has read its copy, then writes.
    Vec<T> out[kOnePhaseVectors];
#pragma unroll
    for (int j = 0; j < kOnePhaseVectors; ++j) {
      const int i = (int(threadIdx.x) + j * int(blockDim.x)) * V;
      if (i < count) out[j] = reduce_vector(buf, i, n, op, peers);
    }
    cluster_sync();
#pragma unroll
    for (int j = 0; j < kOnePhaseVectors; ++j) {
      const int i = (int(threadIdx.x) + j * int(blockDim.x)) * V;
      if (i < count) *reinterpret_cast<Vec<T>*>(buf + i) = out[j];
    }
    __syncthreads();
    return;
  }
  int begin, end;
  owned_slice(count, V, rank, n, begin, end);
  const int full_end = begin + (end - begin) / V * V;
  for (int i = begin + threadIdx.x * V; i < full_end; i += blockDim.x * V)
    *reinterpret_cast<Vec<T>*>(buf + i) = reduce_vector(buf, i, n, op, peers);
  for (int i = full_end + threadIdx.x; i < end; i += blockDim.x) {
    float acc = to_f32(peers(buf, 0)[i]);
    for (unsigned p = 1; p < n; ++p) acc = op(acc, to_f32(peers(buf, p)[i]));
    buf[i] = from_f32<T>(acc);
  }
  peers.fence();
  cluster_sync();
  for (unsigned p = 0; p < n; ++p) {
    if (p == rank) continue;
    int pb, pe;
    owned_slice(count, V, p, n, pb, pe);
    copy_range(buf, static_cast<const T*>(peers(buf, p)), pb, pe);
  }
  cluster_sync();
}

// ---- Push form: all_reduce of a small buffer without cluster barriers ----------------------
//
// Every CTA stores its buffer into its own slot of every peer's receive area (st.async: the
// bytes are counted on the peer's mbarrier, no round trip), waits on its own mbarrier until
// all N - 1 peers' bytes are in, and reduces the N copies in rank order as all_reduce does
// (f32, the same bits on every CTA). Two receive areas alternate call by call: a peer stores
// call i + 2 into the area of call i only after it received this CTA's call i + 1, which this
// CTA sends only after it finished reading call i (the call ends with a block barrier). Every
// store a CTA receives arrives before its call returns, so no CTA waits for another to exit.
//
// Shared memory (push_reduce_bytes): two 8-byte mbarriers, then [2][N][bytes rounded up to 16].
// The buffer itself must be 16-byte aligned with its size rounded up to 16 bytes (whole
// vectors travel; elements past `count` are not reduced).
__host__ __device__ constexpr size_t push_reduce_bytes(size_t max_bytes, int cluster_size) {
  return 16 + 2 * size_t(cluster_size) * ((max_bytes + 15) / 16 * 16);
}

class PushReducer {
 public:
  // Collective over the cluster (every thread of every CTA): `storage` is
  // push_reduce_bytes(max_bytes, cluster size) of 16-byte aligned shared memory. One cluster
  // barrier, so that every peer's mbarriers are initialized before any store reaches them.
  __device__ PushReducer(void* storage, size_t max_bytes)
      : bars_(static_cast<uint64_t*>(storage)),
        slots_(static_cast<unsigned char*>(storage) + 16),
        slot_bytes_(uint32_t((max_bytes + 15) / 16 * 16)),
        rank_(cluster_rank()),
        size_(cluster_size()) {
    if (threadIdx.x == 0) {
      for (int a = 0; a < 2; ++a)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(bars_ + a)));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();
  }

  // buf[count] = op over the cluster's ranks, on every rank; count * sizeof(T) <= max_bytes.
  // buf must be complete in this CTA when the call starts (written, then a block barrier: every
  // thread sends parts of it); the result is complete in this CTA when the call returns.
  template <typename T, typename Op>
  __device__ void all_reduce(T* buf, int count, Op op) {
    constexpr int V = kVec<T>;
    const unsigned rank = rank_, n = size_;
    const int vectors = (count + V - 1) / V;
    const int area = int(calls_ & 1u);
    const uint32_t parity = (calls_ >> 1) & 1u;
    ++calls_;
    if (n == 1) return;
    const uint32_t bar = smem_address(bars_ + area);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                   "r"(uint32_t(n - 1) * uint32_t(vectors) * 16u)
                   : "memory");
    }
    // A thread loads each of its vectors once and stores it to every peer, in the order
    // rank + 1, rank + 2, ... so the CTAs of a cluster start on different peers. (One store a
    // thread, spread by a division over (peer, vector), measured 0.61 us against this form's
    // 0.51 at c4 1 KB: docs/PERF.md.)
    const uint32_t my_slot = smem_address(slot(area, rank));  // as every peer holds it
    for (int j = int(threadIdx.x); j < vectors; j += int(blockDim.x)) {
      const uint4 v = reinterpret_cast<const uint4*>(buf)[j];
      unsigned peer = rank;
      for (unsigned k = 1; k < n; ++k) {
        peer = peer + 1 == n ? 0u : peer + 1;
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, "
            "%4}, [%5];" ::"r"(map_to_rank(my_slot, peer) + uint32_t(j) * 16u),
            "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(map_to_rank(bar, peer))
            : "memory");
      }
    }
    // Only the threads that reduce wait for the peers; the rest go on to the block barrier.
    if (int(threadIdx.x) < vectors) {
      wait_parity(bar, parity);
      for (int j = int(threadIdx.x); j < vectors; j += int(blockDim.x)) {
        float acc[V];
        for (unsigned p = 0; p < n; ++p) {
          const T* src = p == rank ? buf : reinterpret_cast<const T*>(slot(area, p));
          const Vec<T> x = reinterpret_cast<const Vec<T>*>(src)[j];
#pragma unroll
          for (int e = 0; e < V; ++e) acc[e] = p == 0 ? to_f32(x.v[e]) : op(acc[e], to_f32(x.v[e]));
        }
        Vec<T> out;
#pragma unroll
        for (int e = 0; e < V; ++e) out.v[e] = from_f32<T>(acc[e]);
        reinterpret_cast<Vec<T>*>(buf)[j] = out;
      }
    }
    __syncthreads();  // no thread reads area `area` once the next call's stores may leave
  }

 private:
  static __device__ uint32_t smem_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
  }
  static __device__ uint32_t map_to_rank(uint32_t address, unsigned rank) {
    uint32_t mapped;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(mapped) : "r"(address), "r"(rank));
    return mapped;
  }
  static __device__ void wait_parity(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
          " selp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    }
  }
  __device__ unsigned char* slot(int area, unsigned rank) const {
    return slots_ + (size_t(area) * size_ + rank) * slot_bytes_;
  }

  uint64_t* bars_;
  unsigned char* slots_;
  uint32_t slot_bytes_;
  unsigned rank_, size_;  // read once: the special registers cost a round trip each
  uint32_t calls_ = 0;
};

// buf[N][count]: rank r's slot buf + r * count goes to every peer (vector copies where the
// slots are 16-byte aligned).
template <typename T, typename Peers = DsmemPeers>
__device__ void all_gather(T* buf, int count, Peers peers = {}) {
  const unsigned rank = cluster_rank(), n = cluster_size();
  peers.fence();
  cluster_sync();
  for (unsigned p = 0; p < n; ++p) {
    if (p == rank) continue;
    copy_range(buf + p * count, static_cast<const T*>(peers(buf, p)) + p * count, 0, count);
  }
  cluster_sync();
}

// Sum or max of `v` over the threads of this block, in a fixed order; the result is returned
// on every thread. `scratch` holds 32 floats of shared memory.
template <typename Op>
__device__ float block_reduce(float v, Op op, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float acc = scratch[0];
  for (int w = 1; w < warps; ++w) acc = op(acc, scratch[w]);
  return acc;
}

// One value per CTA (already the same on every thread of it), combined in rank order and
// returned on every thread of the cluster. `slots` holds 16 floats of shared memory.
template <typename Op, typename Peers = DsmemPeers>
__device__ float reduce_scalar(float v, Op op, float* slots, Peers peers = {}) {
  const unsigned rank = cluster_rank(), n = cluster_size();
  cluster_sync();  // every peer's slots are free
  if (threadIdx.x < n) peers(slots, threadIdx.x)[rank] = v;
  peers.fence();
  cluster_sync();
  float acc = slots[0];
  for (unsigned p = 1; p < n; ++p) acc = op(acc, slots[p]);
  return acc;
}

}  // namespace tessera::cluster
