#include <charconv>

#include "sched/strategies.h"
#include "tessera/core/error.h"

namespace tessera::sched {

namespace {

// "nanoflow" or "nanoflow:P" (P: its GEMMs' share of the multiprocessors, 1 to 100); false for
// other names.
bool parse_nanoflow(const std::string& name, int& percent) {
  constexpr std::string_view kName = "nanoflow";
  if (name == kName) {
    percent = kNanoFlowGemmSmPercent;
    return true;
  }
  if (!name.starts_with(std::string(kName) + ":")) return false;
  const char* first = name.data() + kName.size() + 1;
  const char* last = name.data() + name.size();
  const auto [end, error] = std::from_chars(first, last, percent);
  TESSERA_CHECK_ARG(
      error == std::errc() && end == last && first != last && percent >= 1 && percent <= 100,
      "strategy = '", name,
      "': expected nanoflow:P with P the GEMMs' share of the multiprocessors, 1 to "
      "100");
  return true;
}

}  // namespace

std::vector<std::string> strategy_names() {
  return {"sequential", "nanoflow", "dual_batch", "tokenweave"};
}

std::unique_ptr<Strategy> make_strategy(const std::string& name) {
  int percent = 0;
  if (name == "sequential") return std::make_unique<SequentialStrategy>();
  if (parse_nanoflow(name, percent)) return std::make_unique<NanoFlowStrategy>(percent);
  if (name == "dual_batch") return std::make_unique<DualBatchStrategy>();
  if (name == "tokenweave") return std::make_unique<TokenWeaveStrategy>();
  throw_error(
      ErrorCode::kInvalidArgument,
      str("strategy = '", name, "': expected sequential, nanoflow[:P], dual_batch or tokenweave"));
}

bool known_strategy(const std::string& name) {
  try {
    (void)make_strategy(name);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace tessera::sched
