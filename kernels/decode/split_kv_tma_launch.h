// The TMA-fed split-KV kernel's host side (split_kv_tma.cuh): which shapes it takes, how many
// of its pipelines a multiprocessor holds, and the launch (tensor maps encoded once per cache).
#pragma once

#include <cuda_runtime.h>

#include "decode/unfused_launch.h"

namespace tessera::decode::kernels {

// Its pipelines a multiprocessor holds for these shapes (the "CTAs" of a wave for the split
// rule), or 0 where it does not take them (head dimensions other than 64 and 128, groups over 16).
int split_kv_tma_pipes(int head_dim, int group);

// Launches it when it takes p (the shapes above, 16-byte aligned caches whose 16-token blocks
// are contiguous rows: contiguous, or pages of a multiple of 16 tokens) and returns true; false
// leaves p to the cp.async kernel.
bool launch_split_kv_tma(const UnfusedDecodeParams& p, cudaStream_t stream);

}  // namespace tessera::decode::kernels
