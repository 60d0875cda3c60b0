// LoopbackRanks without the cuda backend: refused (tessera/comm/loopback.h).
#ifndef TESSERA_WITH_CUDA
#include "tessera/comm/loopback.h"

#include "tessera/core/error.h"

namespace tessera {

struct LoopbackRanks::Impl {};

LoopbackRanks::LoopbackRanks(int, Device gpu, ContextOptions) {
  throw_error(ErrorCode::kUnsupported,
              str("LoopbackRanks: device = ", gpu.to_string(),
                  ": this build has no cuda backend (loopback ranks run on a GPU)"));
}
LoopbackRanks::~LoopbackRanks() = default;
int LoopbackRanks::size() const {
  return 0;
}
RankContext& LoopbackRanks::context(int) {
  throw_error(ErrorCode::kUnsupported, "no cuda backend");
}
void LoopbackRanks::run_each(const std::function<void(RankContext&)>&) {}

}  // namespace tessera
#endif
