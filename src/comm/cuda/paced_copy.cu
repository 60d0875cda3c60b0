// Paced copy kernel (see paced_copy.h for what it computes).
//
// Index equations: with C CTAs and slice = ceil(B / C) rounded up to 16 bytes, CTA c copies
// bytes [c * slice, min(B, (c + 1) * slice)) in pieces of kPieceBytes. Piece [p, q) of CTA c is
// written no earlier than
//   t0_c + latency_ns + (q - c * slice) / (bandwidth / C)
// where t0_c is when CTA c started; the last piece of the largest slice therefore lands no
// earlier than t0 + latency + slice * C / bandwidth >= t0 + latency + B / bandwidth.
// Shared links (clocks set): CTA c walks its slice in quanta of Q bytes; quantum [p, q) is
// written no earlier than max(reserve(egress), reserve(ingress)) + latency, where
// reserve(clock) = (clock := max(clock, now) + (q - p) / bandwidth). The link's clocks only
// move forward by the bytes reserved, so no more than bandwidth * t + Q bytes cross one NIC in
// any busy period of length t, whatever the number of copies and GPUs sharing it.
#include "comm/cuda/paced_copy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "comm/cuda/device_primitives.cuh"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::cuda_comm {

namespace {

constexpr int kThreads = 256;
constexpr size_t kPieceBytes = 16384;  // released at once by one CTA
constexpr int kMaxCtas = 32;
constexpr double kCtaGbps = 8.0;  // what one CTA is planned to move (remote reads bound it)
constexpr double kSharedLinkCtaGbps = 2.5;  // the same on a shared link (see paced_copy_num_ctas)
constexpr size_t kMinSliceBytes = 65536;
constexpr double kQuantumNs = 20000.0;  // link time one shared-link reservation covers
constexpr size_t kMinQuantumBytes = 65536;

// rows x row_bytes; row r at dst + r * dst_pitch and src + r * src_pitch. A 1-D copy is one
// row. Bytes are numbered in row-major order (byte b is column b % row_bytes of row
// b / row_bytes): slices, pieces and pacing count these packed bytes, not the pitched span.
struct PacedCopyParams {
  unsigned char* dst;
  const unsigned char* src;
  size_t dst_pitch;
  size_t src_pitch;
  size_t row_bytes;
  size_t bytes;        // rows * row_bytes
  bool whole_vectors;  // every row starts V-aligned on both sides and row_bytes % V == 0
  size_t slice_bytes;  // per CTA
  uint64_t latency_ns;
  double cta_bytes_per_ns;  // 0: no bandwidth pacing
  // Shared link (clocks non-null): the whole link's rate, the reservation quantum and the
  // clocks' time base.
  unsigned long long* egress_clock;
  unsigned long long* ingress_clock;
  int64_t time_offset_ns;
  double link_bytes_per_ns;
  size_t quantum_bytes;
};

// Copies bytes [begin, end) by the block; V is the vector type. dst and src are co-aligned to
// sizeof(V), so aligning dst + i aligns src + i too.
template <typename V>
__device__ __forceinline__ void copy_range(unsigned char* dst, const unsigned char* src,
                                           size_t begin, size_t end) {
  constexpr size_t kWidth = sizeof(V);
  const size_t misalign = reinterpret_cast<uintptr_t>(dst + begin) % kWidth;
  const size_t aligned_begin = std::min(end, begin + (misalign ? kWidth - misalign : 0));
  const size_t num_vectors = (end - aligned_begin) / kWidth;
  const size_t aligned_end = aligned_begin + num_vectors * kWidth;
  const size_t tid = threadIdx.x;
  const size_t stride = blockDim.x;

  for (size_t i = begin + tid; i < aligned_begin; i += stride) dst[i] = src[i];

  V* dv = reinterpret_cast<V*>(dst + aligned_begin);
  const V* sv = reinterpret_cast<const V*>(src + aligned_begin);
  size_t i = tid;
  // Four loads in flight per thread before the stores: reads through NVLink have microsecond
  // latency, so one outstanding load per thread would starve the link.
  for (; i + 3 * stride < num_vectors; i += 4 * stride) {
    const V r0 = sv[i];
    const V r1 = sv[i + stride];
    const V r2 = sv[i + 2 * stride];
    const V r3 = sv[i + 3 * stride];
    dv[i] = r0;
    dv[i + stride] = r1;
    dv[i + 2 * stride] = r2;
    dv[i + 3 * stride] = r3;
  }
  for (; i < num_vectors; i += stride) dv[i] = sv[i];

  for (size_t j = aligned_end + tid; j < end; j += stride) dst[j] = src[j];
}

// Copies packed bytes [begin, end) of a pitched copy by the block.
template <typename V>
__device__ __forceinline__ void copy_pitched(const PacedCopyParams& p, size_t begin, size_t end) {
  if (p.whole_vectors) {
    // All threads stride over the piece's vectors across row boundaries, so short rows (a few
    // hundred bytes) still keep the block busy. begin and end are multiples of sizeof(V).
    constexpr size_t kWidth = sizeof(V);
    const size_t vectors_per_row = p.row_bytes / kWidth;
    const size_t first = begin / kWidth;
    const size_t count = (end - begin) / kWidth;
    const size_t stride = blockDim.x;
    size_t i = threadIdx.x;
    auto load = [&](size_t k, size_t& row, size_t& col) {
      row = (first + k) / vectors_per_row;
      col = (first + k) - row * vectors_per_row;
      return reinterpret_cast<const V*>(p.src + row * p.src_pitch)[col];
    };
    auto store = [&](size_t row, size_t col, const V& v) {
      reinterpret_cast<V*>(p.dst + row * p.dst_pitch)[col] = v;
    };
    // Two loads in flight per thread before the stores (remote reads are slow; see copy_range).
    for (; i + stride < count; i += 2 * stride) {
      size_t r0, c0, r1, c1;
      const V v0 = load(i, r0, c0);
      const V v1 = load(i + stride, r1, c1);
      store(r0, c0, v0);
      store(r1, c1, v1);
    }
    for (; i < count; i += stride) {
      size_t r, c;
      const V v = load(i, r, c);
      store(r, c, v);
    }
    return;
  }
  // General case: row by row, with byte heads and tails (rows are co-aligned to sizeof(V)).
  for (size_t row = begin / p.row_bytes; row * p.row_bytes < end; ++row) {
    const size_t row_begin = row * p.row_bytes;
    const size_t from = begin > row_begin ? begin - row_begin : 0;
    const size_t to = std::min(p.row_bytes, end - row_begin);
    copy_range<V>(p.dst + row * p.dst_pitch, p.src + row * p.src_pitch, from, to);
  }
}

// Reserves `duration_ns` on a link clock from max(clock, now); returns when it ends. atomicMax
// then atomicAdd: the reservation starts no earlier than now and after every earlier one.
__device__ __forceinline__ uint64_t reserve_link(unsigned long long* clock, uint64_t now,
                                                 uint64_t duration_ns) {
  atomicMax_system(clock, static_cast<unsigned long long>(now));
  return uint64_t(atomicAdd_system(clock, static_cast<unsigned long long>(duration_ns))) +
         duration_ns;
}

__global__ void link_reservation_kernel(LinkClocks clocks, uint64_t duration_ns,
                                        uint64_t latency_ns, unsigned long long* release_ns) {
  const uint64_t now = uint64_t(int64_t(global_timer_ns()) + clocks.time_offset_ns);
  const uint64_t sent = std::max(reserve_link(clocks.egress, now, duration_ns),
                                 reserve_link(clocks.ingress, now, duration_ns));
  *release_ns = static_cast<unsigned long long>(int64_t(sent + latency_ns) - clocks.time_offset_ns);
}

__global__ void hold_until_release_kernel(const unsigned long long* release_ns) {
  sleep_until(uint64_t(*release_ns));
}

// The shared-link mode: the CTA's slice in quanta, each released when both NICs have carried it.
template <typename V>
__device__ void copy_on_shared_link(const PacedCopyParams& p, size_t begin, size_t end) {
  for (size_t quantum = begin; quantum < end; quantum += p.quantum_bytes) {
    const size_t quantum_end = std::min(end, quantum + p.quantum_bytes);
    if (threadIdx.x == 0) {
      const uint64_t duration = uint64_t(ceil(double(quantum_end - quantum) / p.link_bytes_per_ns));
      const uint64_t now = uint64_t(int64_t(global_timer_ns()) + p.time_offset_ns);
      const uint64_t sent = std::max(reserve_link(p.egress_clock, now, duration),
                                     reserve_link(p.ingress_clock, now, duration));
      sleep_until(uint64_t(int64_t(sent + p.latency_ns) - p.time_offset_ns));
    }
    __syncthreads();
    copy_pitched<V>(p, quantum, quantum_end);
  }
}

template <typename V>
__global__ void __launch_bounds__(kThreads) paced_copy_kernel(PacedCopyParams p) {
  if (p.egress_clock != nullptr) {
    const size_t begin = size_t(blockIdx.x) * p.slice_bytes;
    copy_on_shared_link<V>(p, begin, std::min(p.bytes, begin + p.slice_bytes));
    __threadfence_system();
    return;
  }
  __shared__ uint64_t start_ns;
  if (threadIdx.x == 0) start_ns = global_timer_ns();
  __syncthreads();
  const size_t begin = size_t(blockIdx.x) * p.slice_bytes;
  const size_t end = std::min(p.bytes, begin + p.slice_bytes);
  const bool paced = p.latency_ns > 0 || p.cta_bytes_per_ns > 0;
  for (size_t piece = begin; piece < end; piece += kPieceBytes) {
    const size_t piece_end = std::min(end, piece + kPieceBytes);
    if (paced) {
      if (threadIdx.x == 0) {
        uint64_t release = start_ns + p.latency_ns;
        if (p.cta_bytes_per_ns > 0) {
          release += uint64_t(ceil(double(piece_end - begin) / p.cta_bytes_per_ns));
        }
        sleep_until(release);
      }
      __syncthreads();
    }
    copy_pitched<V>(p, piece, piece_end);
  }
  // The data is visible system-wide before any later signal on this stream.
  __threadfence_system();
}

// The widest vector at which every row of dst and src is co-aligned: the bases agree modulo
// the width and so do the pitches.
int vector_width(const void* dst, const void* src, size_t dst_pitch, size_t src_pitch) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  for (int width : {16, 8, 4, 2}) {
    if (d % width == s % width && dst_pitch % width == src_pitch % width) return width;
  }
  return 1;
}

void launch(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
            size_t rows, double bandwidth_gbps, double latency_us, cudaStream_t stream,
            const LinkClocks& clocks) {
  const size_t bytes = rows * row_bytes;
  if (bytes == 0) return;  // nothing to deliver; a following signal carries the latency
  if (rows == 1) dst_pitch = src_pitch = row_bytes;
  const bool shared = clocks.shared() && bandwidth_gbps > 0;
  const int num_ctas = paced_copy_num_ctas(bytes, bandwidth_gbps, shared);
  PacedCopyParams p{};
  p.dst = static_cast<unsigned char*>(dst);
  p.src = static_cast<const unsigned char*>(src);
  p.dst_pitch = dst_pitch;
  p.src_pitch = src_pitch;
  p.row_bytes = row_bytes;
  p.bytes = bytes;
  p.slice_bytes = std::max<size_t>(16, ((bytes + num_ctas - 1) / num_ctas + 15) / 16 * 16);
  p.latency_ns = latency_us > 0 ? uint64_t(std::llround(latency_us * 1000.0)) : 0;
  p.cta_bytes_per_ns = bandwidth_gbps > 0 ? bandwidth_gbps / num_ctas : 0.0;
  if (shared) {
    p.egress_clock = clocks.egress;
    p.ingress_clock = clocks.ingress;
    p.time_offset_ns = clocks.time_offset_ns;
    p.link_bytes_per_ns = bandwidth_gbps;
    p.quantum_bytes = link_quantum_bytes(bandwidth_gbps);
  }
  const int width = vector_width(dst, src, dst_pitch, src_pitch);
  // Slices and pieces are multiples of 16 bytes, so with whole vectors per row every piece
  // starts and ends on a vector. One row keeps the general path (the plain 1-D copy).
  p.whole_vectors = rows > 1 && reinterpret_cast<uintptr_t>(dst) % width == 0 &&
                    dst_pitch % width == 0 && row_bytes % width == 0;
  switch (width) {
    case 16:
      paced_copy_kernel<uint4><<<num_ctas, kThreads, 0, stream>>>(p);
      break;
    case 8:
      paced_copy_kernel<uint2><<<num_ctas, kThreads, 0, stream>>>(p);
      break;
    case 4:
      paced_copy_kernel<uint32_t><<<num_ctas, kThreads, 0, stream>>>(p);
      break;
    case 2:
      paced_copy_kernel<uint16_t><<<num_ctas, kThreads, 0, stream>>>(p);
      break;
    default:
      paced_copy_kernel<uint8_t><<<num_ctas, kThreads, 0, stream>>>(p);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

void check_clocks(const LinkClocks& clocks, const char* op) {
  TESSERA_CHECK_ARG((clocks.egress == nullptr) == (clocks.ingress == nullptr), op,
                    ": link clocks egress=", static_cast<void*>(clocks.egress),
                    ", ingress=", static_cast<void*>(clocks.ingress),
                    "; expected both set (a shared link) or both null (a private one)");
}

}  // namespace

int paced_copy_num_ctas(size_t bytes, double bandwidth_gbps, bool shared_link) {
  if (shared_link && bandwidth_gbps > 0) {
    // Each CTA reserves, sleeps, then copies its quantum. The clocks, not the CTAs, hold the
    // rate, so CTAs are planned generously: pitched remote reads beside other transfers move
    // ~3 GB/s per CTA (4x1 nic400 timelines: 11 CTAs carried 33 of 50 GB/s).
    const int by_size = int(std::min<size_t>(
        kMaxCtas, std::max<size_t>(1, bytes / link_quantum_bytes(bandwidth_gbps))));
    const int by_rate = int(std::ceil(bandwidth_gbps / kSharedLinkCtaGbps)) + 1;
    return std::max(1, std::min({by_size, by_rate, kMaxCtas}));
  }
  int by_size = int(std::min<size_t>(kMaxCtas, std::max<size_t>(1, bytes / kMinSliceBytes)));
  if (bandwidth_gbps <= 0) return by_size;
  int by_rate = int(std::ceil(bandwidth_gbps / kCtaGbps));
  return std::max(1, std::min({by_size, by_rate, kMaxCtas}));
}

size_t link_quantum_bytes(double bandwidth_gbps) {
  const size_t by_time = size_t(std::max(0.0, bandwidth_gbps) * kQuantumNs);  // GB/s = bytes/ns
  return std::max(kMinQuantumBytes, by_time / 16 * 16);
}

void launch_paced_copy(void* dst, const void* src, size_t bytes, const LinkSpec& link,
                       cudaStream_t stream, const LinkClocks& clocks) {
  TESSERA_CHECK_ARG(bytes == 0 || (dst != nullptr && src != nullptr), "paced copy of ", bytes,
                    " bytes: dst=", dst, ", src=", src, "; expected device pointers");
  TESSERA_CHECK_ARG(
      std::isfinite(link.bandwidth_gbps) && std::isfinite(link.latency_us) && link.latency_us >= 0,
      "emulated link (bandwidth ", link.bandwidth_gbps, " GB/s, latency ", link.latency_us,
      " us): expected finite values and latency >= 0");
  check_clocks(clocks, "paced copy");
  launch(dst, bytes, src, bytes, bytes, 1, link.bandwidth_gbps, link.latency_us, stream, clocks);
}

void launch_paced_copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t row_bytes, size_t rows, const LinkSpec& link, cudaStream_t stream,
                          const LinkClocks& clocks) {
  const bool empty = rows == 0 || row_bytes == 0;
  TESSERA_CHECK_ARG(empty || (dst != nullptr && src != nullptr), "paced 2-D copy of ", rows,
                    " rows of ", row_bytes, " bytes: dst=", dst, ", src=", src,
                    "; expected device pointers");
  TESSERA_CHECK_ARG(empty || rows == 1 || (dst_pitch >= row_bytes && src_pitch >= row_bytes),
                    "paced 2-D copy of ", rows, " rows of ", row_bytes, " bytes: dst_pitch ",
                    dst_pitch, ", src_pitch ", src_pitch, "; expected pitches >= row_bytes");
  TESSERA_CHECK_ARG(
      std::isfinite(link.bandwidth_gbps) && std::isfinite(link.latency_us) && link.latency_us >= 0,
      "emulated link (bandwidth ", link.bandwidth_gbps, " GB/s, latency ", link.latency_us,
      " us): expected finite values and latency >= 0");
  check_clocks(clocks, "paced 2-D copy");
  launch(dst, dst_pitch, src, src_pitch, row_bytes, rows, link.bandwidth_gbps, link.latency_us,
         stream, clocks);
}

void launch_link_reservation(const LinkClocks& clocks, size_t bytes, const LinkSpec& link,
                             unsigned long long* release_ns, cudaStream_t stream) {
  TESSERA_CHECK_ARG(clocks.shared() && clocks.ingress != nullptr && release_ns != nullptr,
                    "link reservation: clocks egress=", static_cast<void*>(clocks.egress),
                    ", ingress=", static_cast<void*>(clocks.ingress),
                    ", release word=", static_cast<void*>(release_ns), "; expected device words");
  TESSERA_CHECK_ARG(link.bandwidth_gbps > 0 && link.latency_us >= 0, "link reservation: link ",
                    link.bandwidth_gbps, " GB/s, ", link.latency_us,
                    " us; expected bandwidth > 0 and latency >= 0");
  const uint64_t duration = uint64_t(std::ceil(double(bytes) / link.bandwidth_gbps));
  const uint64_t latency = uint64_t(std::llround(link.latency_us * 1000.0));
  link_reservation_kernel<<<1, 1, 0, stream>>>(clocks, duration, latency, release_ns);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_hold_until_release(const unsigned long long* release_ns, cudaStream_t stream) {
  TESSERA_CHECK_ARG(release_ns != nullptr, "hold until release: null release word");
  hold_until_release_kernel<<<1, 1, 0, stream>>>(release_ns);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_peer_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  TESSERA_CHECK_ARG(bytes == 0 || (dst != nullptr && src != nullptr), "peer copy of ", bytes,
                    " bytes: dst=", dst, ", src=", src, "; expected device pointers");
  launch(dst, bytes, src, bytes, bytes, 1, 0.0, 0.0, stream, {});
}

}  // namespace tessera::cuda_comm
