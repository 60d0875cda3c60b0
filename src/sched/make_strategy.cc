#include "sched/strategies.h"
#include "tessera/core/error.h"

namespace tessera::sched {

std::vector<std::string> strategy_names() {
  return {"sequential", "nanoflow", "dual_batch", "tokenweave"};
}

std::unique_ptr<Strategy> make_strategy(const std::string& name) {
  if (name == "sequential") return std::make_unique<SequentialStrategy>();
  if (name == "nanoflow") return std::make_unique<NanoFlowStrategy>();
  if (name == "dual_batch") return std::make_unique<DualBatchStrategy>();
  if (name == "tokenweave") return std::make_unique<TokenWeaveStrategy>();
  throw_error(ErrorCode::kInvalidArgument,
              str("strategy = '", name, "': expected sequential, nanoflow, dual_batch or tokenweave"));
}

}  // namespace tessera::sched
