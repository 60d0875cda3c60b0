#include "tessera/runtime/memory.h"

#include <cstring>

#include "tessera/core/error.h"

namespace tessera {

#ifdef TESSERA_WITH_CUDA
void cuda_copy_bytes(void* dst, const void* src, size_t bytes, void* stream);
void cuda_fill_bytes(void* dst, int value, size_t bytes, void* stream);
#endif

void copy_bytes(void* dst, const void* src, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  TESSERA_CHECK_ARG(dst != nullptr && src != nullptr, "copy_bytes of ", bytes,
                    " bytes: dst and src must be non-null");
  if (stream.backend() == Backend::kCpu) {
    std::memmove(dst, src, bytes);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  cuda_copy_bytes(dst, src, bytes, stream.cuda_stream());
#endif
}

void fill_bytes(void* dst, int value, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  TESSERA_CHECK_ARG(dst != nullptr, "fill_bytes of ", bytes, " bytes: dst must be non-null");
  if (stream.backend() == Backend::kCpu) {
    std::memset(dst, value, bytes);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  cuda_fill_bytes(dst, value, bytes, stream.cuda_stream());
#endif
}

}  // namespace tessera
