#include <charconv>
#include <vector>

#include "sched/strategies.h"
#include "tessera/core/error.h"

namespace tessera::sched {

namespace {

// A strategy's name with its parameters: `base` alone, or "base:A[:B...]" with at most `most`
// integers.
struct NameParameters {
  bool matches = false;  // `base`, with or without parameters
  bool well_formed = true;
  std::vector<int64_t> values;
};
NameParameters parameters_of(const std::string& name, std::string_view base, size_t most) {
  NameParameters out;
  const std::string prefix = std::string(base) + ":";
  out.matches = name == base || name.starts_with(prefix);
  if (name == base || !out.matches) return out;
  const char* p = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  while (true) {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(p, last, value);
    if (error != std::errc() || end == p || out.values.size() == most) {
      out.well_formed = false;
      return out;
    }
    out.values.push_back(value);
    if (end == last) return out;
    if (*end != ':') {
      out.well_formed = false;
      return out;
    }
    p = end + 1;
  }
}

// values[i] when given, else `otherwise`.
int64_t value_or(const NameParameters& got, size_t i, int64_t otherwise) {
  return i < got.values.size() ? got.values[i] : otherwise;
}

// "nanoflow", "nanoflow:P", "nanoflow:P:W" or "nanoflow:P:W:K" (P: the GEMMs' share of the
// multiprocessors, 1 to 100; W: how many GEMMs after the other nano-batch's attention take it,
// 1 to 64, or 0 for all; K: the cached positions that cost one row of GEMMs in the split,
// overlap_balanced_split's positions_per_row); false for other names.
bool parse_nanoflow(const std::string& name, int& percent, int& shared_gemms,
                    int64_t& positions_per_row) {
  const NameParameters got = parameters_of(name, "nanoflow", 3);
  if (!got.matches) return false;
  const int64_t p = value_or(got, 0, kNanoFlowGemmSmPercent), w = value_or(got, 1, 0),
                k = value_or(got, 2, 0);
  TESSERA_CHECK_ARG(got.well_formed && p >= 1 && p <= 100 && w >= 0 && w <= 64 &&
                        (got.values.size() < 3 || (k >= 1 && k <= kMostPositionsPerRow)),
                    "strategy = '", name,
                    "': expected nanoflow:P[:W[:K]] with P the GEMMs' share of the "
                    "multiprocessors, 1 to 100, W how many GEMMs take it, 0 (all) to 64, and K "
                    "the cached positions costing one row of GEMMs in the split, 1 to ",
                    kMostPositionsPerRow);
  percent = int(p);
  shared_gemms = int(w);
  positions_per_row = k;
  return true;
}

// "single_batch", "single_batch:R" or "single_batch:R:P" (R: the rows of a chunk, 1 to 2^20;
// P: the chunks' GEMMs' share of the multiprocessors, 1 to 100); false for other names.
bool parse_single_batch(const std::string& name, int64_t& chunk_rows, int& percent) {
  const NameParameters got = parameters_of(name, "single_batch", 2);
  if (!got.matches) return false;
  const int64_t r = value_or(got, 0, kSingleBatchChunkRows),
                p = value_or(got, 1, kSingleBatchGemmSmPercent);
  TESSERA_CHECK_ARG(got.well_formed && r >= 1 && r <= (int64_t(1) << 20) && p >= 1 && p <= 100,
                    "strategy = '", name,
                    "': expected single_batch:R[:P] with R the rows of a chunk, 1 to 1048576, "
                    "and P the GEMMs' share of the multiprocessors, 1 to 100");
  chunk_rows = r;
  percent = int(p);
  return true;
}

}  // namespace

std::vector<std::string> strategy_names() {
  return {"sequential", "nanoflow", "dual_batch", "single_batch", "tokenweave"};
}

std::unique_ptr<Strategy> make_strategy(const std::string& name) {
  if (const size_t at = name.find('@'); at != std::string::npos)
    return std::make_unique<PartitionedStrategy>(make_strategy(name.substr(0, at)),
                                                 name.substr(at + 1));
  int percent = 0, shared_gemms = 0;
  int64_t chunk_rows = 0, positions_per_row = 0;
  if (name == "sequential") return std::make_unique<SequentialStrategy>();
  if (parse_nanoflow(name, percent, shared_gemms, positions_per_row))
    return std::make_unique<NanoFlowStrategy>(percent, shared_gemms, positions_per_row);
  if (name == "dual_batch") return std::make_unique<DualBatchStrategy>();
  if (parse_single_batch(name, chunk_rows, percent))
    return std::make_unique<SingleBatchStrategy>(chunk_rows, percent);
  if (name == "tokenweave") return std::make_unique<TokenWeaveStrategy>();
  if (name == "flux") return std::make_unique<FluxStrategy>();
  throw_error(ErrorCode::kInvalidArgument,
              str("strategy = '", name,
                  "': expected sequential, nanoflow[:P[:W[:K]]], dual_batch, single_batch[:R[:P]], "
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
