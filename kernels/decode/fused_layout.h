// Shared-memory layout of the fused decode kernel for a (group, batch tile, hidden slice):
// computed the same way on the host (launch size, occupancy, the plan's checks) and in the
// kernel (offsets). Plain C++ so the host compiler includes it too.
#pragma once

#ifndef TESSERA_HOST_DEVICE
#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif
#endif

namespace tessera::decode::kernels {

inline constexpr int kFusedThreads = 256;
inline constexpr int kFusedWarps = kFusedThreads / 32;
inline constexpr int kFusedHeadDim = 128;
inline constexpr int kStageTokens = 4;   // cached tokens per stage of a warp's K/V ring
// Stages per warp's ring (two in flight while one is read). Five measured slower: 26 us more
// per step for Llama-2 b1 whatever the context (docs/PERF.md), so the ring stays small.
inline constexpr int kRingStages = 3;
inline constexpr int kStageBytes = 2 * kStageTokens * kFusedHeadDim * 2;  // K rows, then V rows
inline constexpr int kRowPad = 32;       // elements after each x / o row: rows start on other banks

struct FusedSmemLayout {
  int x_stride = 0;  // elements per row of x (the CTA's hidden slice, padded)
  int o_stride = 0;  // elements per row of the attention output (G*D, padded)
  // Byte offsets. `a` holds x during the QKV projection, then the warps' K/V rings.
  int a = 0, part = 0, q = 0, kv_new = 0, warp_part = 0, m = 0, m_own = 0, s_new = 0,
      seq = 0, total = 0;
};

TESSERA_HOST_DEVICE constexpr int align16(int bytes) { return (bytes + 15) / 16 * 16; }
TESSERA_HOST_DEVICE constexpr int max_of(int a, int b) { return a > b ? a : b; }

TESSERA_HOST_DEVICE constexpr FusedSmemLayout fused_smem_layout(int group, int batch_tile,
                                                                  int slice) {
  constexpr int D = kFusedHeadDim;
  const int B = batch_tile, G = group;
  FusedSmemLayout l;
  l.x_stride = slice + kRowPad;
  l.o_stride = G * D + kRowPad;
  int off = 0;
  l.a = off;
  off += align16(max_of(B * l.x_stride * 2, kFusedWarps * kRingStages * kStageBytes));
  l.part = off;  // QKV partials [G+2][B][D] + sums of squares [B]; later attention (o, l)
  off += align16(4 * max_of((G + 2) * B * D + B, B * G * (D + 1)));
  l.q = off;  // q [B][G][D] f32; later the attention output [B][o_stride] in the element type
  off += align16(max_of(B * G * D * 4, B * l.o_stride * 2));
  l.kv_new = off;  // the new token's K and V [B][2][D]
  off += align16(B * 2 * D * 2);
  l.warp_part = off;  // each warp's softmax partial [warps][G][D + 2]
  off += align16(kFusedWarps * G * (D + 2) * 4);
  l.m = off;
  off += align16(B * G * 4);
  l.m_own = off;
  off += align16(B * G * 4);
  l.s_new = off;
  off += align16(B * G * 4);
  l.seq = off;  // per sequence: first cached token of this CTA's slice, its end, its stages
  off += align16(3 * B * 4);
  l.total = off;
  return l;
}

}  // namespace tessera::decode::kernels
