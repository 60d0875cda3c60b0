// Backend dispatch for RankContext helpers, and what a build without CUDA says when asked
// for the cuda backend.
#include "tessera/comm/context.h"

#include "tessera/core/error.h"

namespace tessera {

#ifdef TESSERA_WITH_CUDA
// src/comm/cuda/context_cuda.cc
std::unique_ptr<SymmetricHeap> create_cuda_symmetric_heap(RankContext& ctx,
                                                          const std::string& transport,
                                                          size_t bytes);
#else
std::unique_ptr<RankContext> create_cuda_context(std::unique_ptr<Bootstrap>,
                                                 const ContextOptions&) {
  throw_error(ErrorCode::kUnsupported,
              "create_cuda_context: this build of Tessera has no cuda backend (rebuild with "
              "-DTESSERA_CUDA=ON on a machine with nvcc)");
}

std::vector<LinkClass> detect_local_links(int) { return {}; }
#endif

std::unique_ptr<SymmetricHeap> create_symmetric_heap(RankContext& ctx, const std::string& transport,
                                                     size_t bytes) {
  TESSERA_CHECK_ARG(bytes > 0, "create_symmetric_heap: bytes = 0: expected > 0");
  if (ctx.backend == Backend::kCpu) {
    throw_error(ErrorCode::kUnsupported,
                str("create_symmetric_heap(\"", transport, "\"): the cpu backend has one heap per "
                    "run, made by run_cpu_ranks from ContextOptions"));
  }
#ifdef TESSERA_WITH_CUDA
  return create_cuda_symmetric_heap(ctx, transport, bytes);
#else
  throw_error(ErrorCode::kUnsupported, "create_symmetric_heap: no cuda backend in this build");
#endif
}

}  // namespace tessera
