#include "tessera/comm/agreement.h"

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/memory.h"

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
  TESSERA_CHECK_ARG(ctx.world != nullptr, "context of rank ", ctx.rank,
                    " has neither a bootstrap nor a world communicator");
  // The communicator moves device memory on cuda: stage through a buffer on the context's device.
  Buffer scratch = Buffer::allocate(sizeof(uint64_t) * size_t(count * (p + 1)), ctx.device);
  auto* send = static_cast<uint64_t*>(scratch.data());
  uint64_t* recv = send + count;
  const Stream& s = ctx.stream;
  copy_bytes(send, words.data(), words.size_bytes(), s);
  ctx.world->all_gather(TensorView(send, DType::kU64, ctx.device, {count}),
                        TensorView(recv, DType::kU64, ctx.device, {count * p}), s);
  ctx.world->synchronize(s);
  copy_bytes(all.data(), recv, all.size() * sizeof(uint64_t), s);
  s.synchronize();
  return all;
}

}  // namespace tessera
