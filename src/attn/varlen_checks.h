// Internal: the checks of packed varlen operands that the reference and forward_varlen share.
#pragma once

#include "tessera/core/tensor_view.h"

namespace tessera::attn::detail {

// k, v of q's dtype, v of k's shape, k of q's head dim, k's heads dividing q's. Throws
// kInvalidArgument naming the argument. (Ranks, devices and strides are checked by the caller.)
void check_packed_operands(const TensorView& q, const TensorView& k, const TensorView& v);

}  // namespace tessera::attn::detail
