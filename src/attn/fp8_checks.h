// Internal: the checks of FP8 attention operands that the reference and forward_fp8 share.
#pragma once

#include "tessera/attn/attention.h"

namespace tessera::attn::detail {

// v of k's shape, k of q's batch and head dim, k's heads dividing q's, a finite softmax_scale
// > 0, mask strides >= 1. Throws kInvalidArgument naming the argument. (Ranks, dtypes, devices
// and strides are checked by the caller.)
void check_fp8_operands(const TensorView& q, const TensorView& k, const TensorView& v,
                        const MaskSpec& mask, float softmax_scale);

}  // namespace tessera::attn::detail
