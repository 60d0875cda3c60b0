#include <charconv>

#include "sched/strategies.h"
#include "tessera/core/error.h"

namespace tessera::sched {

namespace {

// "nanoflow", "nanoflow:P" or "nanoflow:P:W" (P: the GEMMs' share of the multiprocessors, 1 to
// 100; W: how many GEMMs after the other nano-batch's attention take it, 1 to 64, or all);
// false for other names.
bool parse_nanoflow(const std::string& name, int& percent, int& shared_gemms) {
  constexpr std::string_view kName = "nanoflow";
  percent = kNanoFlowGemmSmPercent;
  shared_gemms = 0;
  if (name == kName) return true;
  if (!name.starts_with(std::string(kName) + ":")) return false;
  const char* first = name.data() + kName.size() + 1;
  const char* last = name.data() + name.size();
  auto [end, error] = std::from_chars(first, last, percent);
  bool ok = error == std::errc() && end != first && percent >= 1 && percent <= 100;
  if (ok && end != last) {
    const char* w = end + 1;
    const auto [w_end, w_error] = std::from_chars(w, last, shared_gemms);
    ok = *end == ':' && w_error == std::errc() && w_end == last && w_end != w &&
         shared_gemms >= 1 && shared_gemms <= 64;
  }
  TESSERA_CHECK_ARG(ok, "strategy = '", name,
                    "': expected nanoflow:P[:W] with P the GEMMs' share of the multiprocessors, "
                    "1 to 100, and W how many GEMMs take it, 1 to 64");
  return true;
}

// "single_batch", "single_batch:R" or "single_batch:R:P" (R: the rows of a chunk, 1 to 2^20;
// P: the chunks' GEMMs' share of the multiprocessors, 1 to 100); false for other names.
bool parse_single_batch(const std::string& name, int64_t& chunk_rows, int& percent) {
  constexpr std::string_view kName = "single_batch";
  chunk_rows = kSingleBatchChunkRows;
  percent = kSingleBatchGemmSmPercent;
  if (name == kName) return true;
  if (!name.starts_with(std::string(kName) + ":")) return false;
  const char* first = name.data() + kName.size() + 1;
  const char* last = name.data() + name.size();
  const auto [end, error] = std::from_chars(first, last, chunk_rows);
  bool ok =
      error == std::errc() && end != first && chunk_rows >= 1 && chunk_rows <= (int64_t(1) << 20);
  if (ok && end != last) {
    const char* p = end + 1;
    const auto [p_end, p_error] = std::from_chars(p, last, percent);
    ok = *end == ':' && p_error == std::errc() && p_end == last && p_end != p && percent >= 1 &&
         percent <= 100;
  }
  TESSERA_CHECK_ARG(ok, "strategy = '", name,
                    "': expected single_batch:R[:P] with R the rows of a chunk, 1 to 1048576, "
                    "and P the GEMMs' share of the multiprocessors, 1 to 100");
  return true;
}

}  // namespace

std::vector<std::string> strategy_names() {
  return {"sequential", "nanoflow", "dual_batch", "single_batch", "tokenweave"};
}

std::unique_ptr<Strategy> make_strategy(const std::string& name) {
  int percent = 0, shared_gemms = 0;
  int64_t chunk_rows = 0;
  if (name == "sequential") return std::make_unique<SequentialStrategy>();
  if (parse_nanoflow(name, percent, shared_gemms))
    return std::make_unique<NanoFlowStrategy>(percent, shared_gemms);
  if (name == "dual_batch") return std::make_unique<DualBatchStrategy>();
  if (parse_single_batch(name, chunk_rows, percent))
    return std::make_unique<SingleBatchStrategy>(chunk_rows, percent);
  if (name == "tokenweave") return std::make_unique<TokenWeaveStrategy>();
  if (name == "flux") return std::make_unique<FluxStrategy>();
  throw_error(ErrorCode::kInvalidArgument,
              str("strategy = '", name,
                  "': expected sequential, nanoflow[:P[:W]], dual_batch, single_batch[:R[:P]], "
                  "tokenweave or flux"));
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
