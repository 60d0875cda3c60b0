// Byte copies and fills on a Stream, whichever devices the pointers live on (cpu: memcpy now;
// cuda: cudaMemcpyAsync with cudaMemcpyDefault, so host<->device and peer copies all work).
#pragma once

#include <cstddef>

#include "tessera/runtime/stream.h"

namespace tessera {

void copy_bytes(void* dst, const void* src, size_t bytes, const Stream& stream);
void fill_bytes(void* dst, int value, size_t bytes, const Stream& stream);

}  // namespace tessera
