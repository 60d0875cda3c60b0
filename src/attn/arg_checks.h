// Internal: the argument checks every attention entry shares (attention.cc, varlen*.cc, fp8*.cc).
#pragma once

#include <string_view>

#include "tessera/core/tensor_view.h"
#include "tessera/runtime/stream.h"

namespace tessera::attn::detail {

// The device every tensor of a call must be on: the stream's (cpu for cpu streams). Throws
// kInvalidArgument naming `what` and both devices.
void check_on_stream(const TensorView& t, const Stream& stream, std::string_view what);

// A finite softmax_scale > 0.
void check_softmax_scale(float softmax_scale);

}  // namespace tessera::attn::detail
