// The emulated cross-machine link for one-sided traffic (comm/emulation.h): a copy kernel that
// reads and writes through peer pointers (a put writes the peer's memory, a get reads it) and
// paces itself with %globaltimer so that a transfer of B bytes completes no earlier than
//   latency_us + B / bandwidth          (bandwidth in GB/s = bytes per ns)
// after the kernel starts. The bytes are split across a few CTAs; CTA c owns a contiguous
// slice and releases it piece by piece at the slice's share of the bandwidth, so the slowest
// slice (the largest) finishes at latency + B / bandwidth. Copies use the widest vector (16,
// 8, 4, 2 or 1 bytes) at which dst and src are co-aligned, with byte-wise heads and tails.
// A pitched (2-D) copy of rows x row_bytes is one kernel paced once on the packed bytes
// rows * row_bytes (one latency, not one per row); when every row is aligned to the vector, the
// block's threads stride over vectors across rows, so short rows still use the whole block.
// The kernel ends with a system fence, so a signal written after it on the same stream (by
// signal_kernels) is ordered after the data.
//
// Shared links (LinkClocks): a GPU's emulated NIC carries every transfer into (ingress) and
// out of (egress) it, whichever GPU runs the copy. With clocks, the copy reserves time on the
// sender's egress clock and the receiver's ingress clock instead of pacing itself alone: each
// CTA takes quanta of its slice (~20 us of link time each) and for a quantum of q bytes
// advances both clocks by q / bandwidth from max(now, clock) (atomicMax, then atomicAdd:
// concurrent reservations never overlap), and writes the quantum no earlier than the later of
// the two reservations' ends plus the latency. Concurrent transfers through one NIC therefore
// share its bandwidth, as the sim's link model assumes (sim.cc: per-rank egress and ingress).
// Clock words hold nanoseconds on one time base for all GPUs: %globaltimer plus the GPU's
// offset to it (clock_probe.h measures the offsets).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tessera/comm/topology.h"

namespace tessera::cuda_comm {

// The emulated NICs a paced copy goes through. Both clocks null: the copy has the link to
// itself (paced alone). Otherwise both must be set: device or peer-mapped 8-byte words.
struct LinkClocks {
  unsigned long long* egress = nullptr;   // the sending GPU's NIC
  unsigned long long* ingress = nullptr;  // the receiving GPU's NIC
  int64_t time_offset_ns = 0;             // this GPU's %globaltimer + offset = clock time base
  bool shared() const { return egress != nullptr; }
};

// Enqueues the paced copy of `bytes` from `src` to `dst` (device or peer-mapped pointers).
// bytes == 0 enqueues nothing (a signal that follows carries the latency itself).
// A link with bandwidth_gbps <= 0 is not paced in bandwidth; latency_us still applies.
void launch_paced_copy(void* dst, const void* src, size_t bytes, const LinkSpec& link,
                       cudaStream_t stream, const LinkClocks& clocks = {});

// The pitched copy: `rows` rows of `row_bytes`, row r from src + r * src_pitch to
// dst + r * dst_pitch (pitches >= row_bytes when rows > 1), paced as one transfer of
// rows * row_bytes bytes. Nothing is enqueued when rows * row_bytes == 0.
void launch_paced_copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t row_bytes, size_t rows, const LinkSpec& link, cudaStream_t stream,
                          const LinkClocks& clocks = {});

// The same kernel with no pacing: a plain SM copy (used for load/store access through peer
// pointers, e.g. by tests that check peer_ptr).
void launch_peer_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// Two-sided traffic held to the emulated link (SymmetricHeap::reserve_link): when the stream
// reaches it, reserves bytes / bandwidth on both clocks and stores in `*release_ns` (this
// GPU's %globaltimer) when the link delivers the last byte; hold_until_release waits on the
// stream until then. One thread each.
void launch_link_reservation(const LinkClocks& clocks, size_t bytes, const LinkSpec& link,
                             unsigned long long* release_ns, cudaStream_t stream);
void launch_hold_until_release(const unsigned long long* release_ns, cudaStream_t stream);

// How many CTAs a paced copy of `bytes` at `bandwidth_gbps` uses (few: a spinning CTA still
// holds SM resources that the overlapped compute would use). `shared_link`: the clocked mode,
// where CTAs take turns on the link and need some slack to keep it busy.
int paced_copy_num_ctas(size_t bytes, double bandwidth_gbps, bool shared_link = false);

// Bytes one reservation on a shared link covers at `bandwidth_gbps` (about 20 us of the link,
// at least 64 KiB, a multiple of 16).
size_t link_quantum_bytes(double bandwidth_gbps);

}  // namespace tessera::cuda_comm
