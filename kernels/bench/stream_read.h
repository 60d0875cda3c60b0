// A streaming read of a device buffer: the HBM read bandwidth that roofline fractions of
// memory-bound kernels (decode) are taken against, measured in the same run.
#pragma once

#include <cstddef>

namespace tessera::bench_kernels {

// Reads `bytes` (a multiple of 16) from `data` with 16-byte loads over the whole device and
// writes one float per block to `sink` (so the reads cannot be dropped). `sink` holds at least
// stream_read_blocks() floats.
void launch_stream_read(const void* data, size_t bytes, float* sink, void* cuda_stream);
int stream_read_blocks();

}  // namespace tessera::bench_kernels
