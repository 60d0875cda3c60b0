// One rank's context as Python sees it: a rank thread's inside tessera.run_cpu_ranks (the
// RankContext lives only while the rank's function runs, and the rank closes the session when
// it returns), or this process's cuda rank from tessera.cuda_context() (owned by the session
// until ctx.close()). Python objects reach the context through the session. Layers planned on
// it are owned here and destroyed at close, before the context (they hold its heap and
// communicators); a Python object kept past that raises instead of touching freed memory.
#pragma once

#include <memory>
#include <vector>

#include "tessera/comm/context.h"

namespace tessera::python {

class RankSession {
 public:
  explicit RankSession(RankContext& ctx) : ctx_(&ctx) {}
  explicit RankSession(std::unique_ptr<RankContext> owned)
      : ctx_(owned.get()), owning_(true), owned_(std::move(owned)) {}

  // Whether the session owns its context (tessera.cuda_context), so Python may close it.
  bool owns_context() const { return owning_; }

  // The live context; throws kInvalidArgument naming `what` after close().
  RankContext& context(const char* what) const;
  bool is_open() const { return ctx_ != nullptr; }
  // Owns `layer` (an sp::SpAttention, a tp::TpOperation) until close(); Python holds the weak
  // handle.
  template <typename Layer>
  std::weak_ptr<Layer> adopt(std::unique_ptr<Layer> layer) {
    std::shared_ptr<Layer> owned(std::move(layer));
    layers_.push_back(owned);
    return owned;
  }
  // Destroys every adopted layer, then the context if owned, and forgets it.
  void close();

 private:
  RankContext* ctx_;
  bool owning_ = false;
  std::unique_ptr<RankContext> owned_;  // declared before layers_: destroyed after them
  std::vector<std::shared_ptr<void>> layers_;  // each destroyed as its own type
};

// tessera.RankContext: what Python holds (a shared session, so layers can check it).
struct RankContextHandle {
  std::shared_ptr<RankSession> session;
};

}  // namespace tessera::python
