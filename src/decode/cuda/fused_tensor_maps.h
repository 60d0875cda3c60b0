// The fused decode kernel's TMA descriptors, encoded on the host from a step's pointers and
// shapes (cuTensorMapEncodeTiled through the runtime's driver entry point, so libtessera does
// not link libcuda). Host work only, a few microseconds; a captured CUDA graph keeps them.
#pragma once

#include <cstdint>

#include "decode/decode_launch.h"

namespace tessera::decode::detail {

// Fills params.tm_*: wq/wk/wv/wo and x from the params' pointers and sizes; the caches viewed
// as [cache_rows, Hkv * D] (B * context_stride, or num_pages * page_size). batch_tile: the
// kernel's x box rows (8 or 16).
void encode_fused_decode_tensor_maps(kernels::FusedDecodeParams& params, int64_t cache_rows,
                                     int batch_tile);

}  // namespace tessera::decode::detail
