#include "tessera/comm/agreement.h"

#include "tessera/core/error.h"

namespace tessera {

uint64_t fingerprint(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<uint64_t> all_gather_words(RankContext& ctx, std::span<const uint64_t> words) {
  const int64_t count = int64_t(words.size()), p = ctx.size;
  std::vector<uint64_t> all(size_t(count * p));
  if (count == 0) return all;
  // Host words: the bootstrap where the context has one (cuda ranks; loopback ranks have no
  // world communicator), else the world communicator (cpu ranks).
  if (ctx.bootstrap) {
    ctx.bootstrap->allgather(words.data(), all.data(), words.size_bytes());
    return all;
  }
  TESSERA_CHECK_ARG(ctx.world != nullptr && !ctx.device.is_cuda(), "context of rank ", ctx.rank,
                    ": expected a bootstrap (cuda ranks) or a world communicator of cpu ranks");
  // The cpu communicator reads the send view only.
  ctx.world->all_gather(
      TensorView(const_cast<uint64_t*>(words.data()), DType::kU64, ctx.device, {count}),
      TensorView(all.data(), DType::kU64, ctx.device, {count * p}), ctx.stream);
  return all;
}

}  // namespace tessera
