// One rank's context as Python sees it inside tessera.run_cpu_ranks. The RankContext lives
// only while the rank's function runs, so Python objects reach it through a RankSession that
// the rank closes when its function returns. Layers planned on the session are owned here and
// destroyed at close (they hold the context's heap and communicators); a Python object kept
// past that raises instead of touching freed memory.
#pragma once

#include <memory>
#include <vector>

#include "tessera/comm/context.h"
#include "tessera/sp/attention_layer.h"

namespace tessera::python {

class RankSession {
 public:
  explicit RankSession(RankContext& ctx) : ctx_(&ctx) {}

  // The live context; throws kInvalidArgument naming `what` after close().
  RankContext& context(const char* what) const;
  bool is_open() const { return ctx_ != nullptr; }
  // Owns `layer` until close(); Python holds the weak handle.
  std::weak_ptr<sp::SpAttention> adopt(std::unique_ptr<sp::SpAttention> layer);
  // Destroys every adopted layer and forgets the context.
  void close();

 private:
  RankContext* ctx_;
  std::vector<std::shared_ptr<sp::SpAttention>> layers_;
};

// tessera.RankContext: what Python holds (a shared session, so layers can check it).
struct RankContextHandle {
  std::shared_ptr<RankSession> session;
};

}  // namespace tessera::python
