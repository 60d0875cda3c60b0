// The HBM read bandwidth that roofline fractions of memory-bound work (decode) are taken
// against, measured in the same run by a streaming read of 4 GiB (kernels/bench/stream_read.h).
#pragma once

#include "tessera/runtime/stream.h"

namespace tessera::cli {

// GB/s (1e9 bytes per second): the median of 20 timed reads after 3 untimed ones, on the
// stream's device. Throws kUnsupported without the cuda backend.
double measure_hbm_read_gbps(const Stream& stream);

}  // namespace tessera::cli
