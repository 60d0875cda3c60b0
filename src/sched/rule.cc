// The strategy rule and its table (tessera/sched/rule.h).
#include "tessera/sched/rule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/core/table_file.h"

namespace tessera::sched {
namespace {

const Param<std::string> kTuneTable("TESSERA_SCHED_TUNE_TABLE", "",
                                    "file of measured scheduler strategy times (tessera bench "
                                    "sched --tune-table); empty: $XDG_CACHE_HOME/tessera/"
                                    "sched_tune.tsv");

bool same_case(const SchedTuneEntry& a, const SchedTuneEntry& b) {
  return a.gpu == b.gpu && a.ranks == b.ranks && a.hidden == b.hidden && a.tokens == b.tokens &&
         a.cached == b.cached && a.strategy == b.strategy;
}

// How far apart two mixes are: cached positions per row, in log scale of 1 + that.
double mix_distance(int64_t tokens_a, int64_t cached_a, int64_t tokens_b, int64_t cached_b) {
  const double a = 1.0 + double(cached_a) / double(std::max<int64_t>(tokens_a, 1));
  const double b = 1.0 + double(cached_b) / double(std::max<int64_t>(tokens_b, 1));
  return std::fabs(std::log(a / b));
}

class RuleStrategy final : public Strategy {
 public:
  RuleStrategy(RuleKey key, std::vector<SchedTuneEntry> table)
      : key_(std::move(key)), table_(std::move(table)) {
    strategies_["sequential"] = make_strategy("sequential");
    for (const SchedTuneEntry& e : table_) {
      // The model takes a strategy's partition before the rule picks: whole-model ones only.
      TESSERA_CHECK_ARG(e.strategy.find('@') == std::string::npos, "auto: the tuning table's '",
                        e.strategy, "': expected a strategy without a partition (@...)");
      if (!strategies_.count(e.strategy)) strategies_[e.strategy] = make_strategy(e.strategy);
    }
  }
  std::string name() const override { return "auto"; }
  std::vector<NanoBatch> split(const model::PackedBatch& batch) const override {
    const int64_t cached = batch.sequences.empty()
                               ? 0
                               : nano_batch_of(batch, 0, batch.sequences.size()).cached_positions;
    return chosen(batch.total_tokens(), cached).split(batch);
  }
  void schedule(ScheduleContext& ctx) const override {
    int64_t rows = 0, cached = 0;
    for (int n = 0; n < ctx.num_nano_batches(); ++n) {
      rows += ctx.nano_batch(n).rows;
      cached += ctx.nano_batch(n).cached_positions;
    }
    chosen(rows, cached).schedule(ctx);
  }
  // Every group a strategy it may pick runs (the model checks them before it knows the pick).
  std::vector<model::FusedGroup> fused_groups() const override {
    std::vector<model::FusedGroup> out;
    for (const auto& [name, strategy] : strategies_)
      for (model::FusedGroup g : strategy->fused_groups())
        if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
    return out;
  }

 private:
  const Strategy& chosen(int64_t tokens, int64_t cached) const {
    return *strategies_.at(pick_strategy(table_, key_, tokens, cached));
  }

  RuleKey key_;
  std::vector<SchedTuneEntry> table_;
  std::map<std::string, std::unique_ptr<Strategy>> strategies_;
};

}  // namespace

std::string sched_tune_table_path() {
  return user_cache_file(kTuneTable, "sched_tune.tsv");
}

std::vector<SchedTuneEntry> read_sched_tune_table(const std::string& path) {
  std::vector<SchedTuneEntry> out;
  for (const TableLine& line : read_table_lines(path)) {
    const std::vector<std::string>& f = line.fields;
    SchedTuneEntry e;
    int64_t ranks = 0;
    // Seven columns, or six from before the cached column.
    const size_t mix = f.size() == 7 ? 1 : 0;
    bool ok = (f.size() == 6 || f.size() == 7) && !f[0].empty() &&
              parse_table_count(f[1], 1 << 20, ranks) &&
              parse_table_count(f[2], int64_t(1) << 40, e.hidden) &&
              parse_table_count(f[3], int64_t(1) << 40, e.tokens) && known_strategy(f[4 + mix]) &&
              parse_table_time(f[5 + mix], e.median_us);
    if (ok && mix) ok = parse_table_integer(f[4], 0, int64_t(1) << 50, e.cached);
    if (!ok) {
      throw_error(
          ErrorCode::kInvalidArgument,
          str(path, ":", line.number, ": '", line.text,
              "': expected gpu, ranks, hidden, tokens (integers >= 1), cached (an integer >= 0; "
              "may be left out), a strategy (sequential, nanoflow[:P[:W[:K]]], dual_batch, "
              "single_batch[:R[:P]] or tokenweave) and median_us (> 0) separated by tabs"));
    }
    e.gpu = f[0];
    e.ranks = int(ranks);
    e.strategy = f[4 + mix];
    out.push_back(e);
  }
  return out;
}

void write_sched_tune_table(const std::string& path, const std::vector<SchedTuneEntry>& entries) {
  for (const SchedTuneEntry& e : entries) {
    check_table_name(e.gpu, "sched tune table entry gpu");
    TESSERA_CHECK_ARG(e.ranks >= 1 && e.hidden >= 1 && e.tokens >= 1 && e.cached >= -1 &&
                          e.median_us > 0 && known_strategy(e.strategy),
                      "sched tune table entry for ", e.gpu, " tokens ", e.tokens, " cached ",
                      e.cached, " ", e.strategy,
                      ": expected sizes >= 1, cached positions >= 0 (-1: not recorded), a known "
                      "strategy and a time > 0");
  }
  std::vector<SchedTuneEntry> all = read_sched_tune_table(path);
  for (const SchedTuneEntry& e : entries) {
    std::erase_if(all, [&](const SchedTuneEntry& old) { return same_case(old, e); });
    all.push_back(e);
  }
  std::vector<std::string> rows;
  for (const SchedTuneEntry& e : all) {
    std::ostringstream row;
    row << e.gpu << '\t' << e.ranks << '\t' << e.hidden << '\t' << e.tokens << '\t';
    if (e.cached >= 0) row << e.cached << '\t';  // a row without its mix stays six columns
    row << e.strategy << '\t' << e.median_us;
    rows.push_back(row.str());
  }
  write_table_lines(path,
                    "gpu\tranks\thidden\ttokens\tcached\tstrategy\tmedian_us (tessera bench "
                    "sched --tune-table)",
                    rows, "sched tune table");
}

std::string pick_strategy(const std::vector<SchedTuneEntry>& table, const RuleKey& key,
                          int64_t tokens, int64_t cached) {
  // The measured token count nearest in log scale, within a factor of 2.
  int64_t nearest = 0;
  double best_distance = std::log(2.0) + 1e-9;
  for (const SchedTuneEntry& e : table) {
    if (e.gpu != key.gpu || e.ranks != key.ranks || e.hidden != key.hidden) continue;
    const double distance =
        std::fabs(std::log(double(e.tokens) / double(std::max<int64_t>(tokens, 1))));
    if (distance < best_distance) {
      best_distance = distance;
      nearest = e.tokens;
    }
  }
  auto at_nearest = [&](const SchedTuneEntry& e) {
    return e.gpu == key.gpu && e.ranks == key.ranks && e.hidden == key.hidden &&
           e.tokens == nearest;
  };
  // Of those rows, the recorded mix nearest the step's (the first such in the table on a tie).
  int64_t mix = -1;
  if (cached >= 0) {
    double best_mix = 0;
    for (const SchedTuneEntry& e : table) {
      if (!at_nearest(e) || e.cached < 0) continue;
      const double d = mix_distance(e.tokens, e.cached, tokens, cached);
      if (mix < 0 || d < best_mix) {
        best_mix = d;
        mix = e.cached;
      }
    }
  }
  std::string best = "sequential";
  double best_us = 0;
  for (const SchedTuneEntry& e : table) {
    if (!at_nearest(e) || (mix >= 0 && e.cached != mix)) continue;
    if (best_us == 0 || e.median_us < best_us) {
      best_us = e.median_us;
      best = e.strategy;
    }
  }
  return best;
}

std::unique_ptr<Strategy> make_rule_strategy(RuleKey key, std::vector<SchedTuneEntry> table) {
  return std::make_unique<RuleStrategy>(std::move(key), std::move(table));
}

std::unique_ptr<Strategy> make_named_strategy(const std::string& name, const RuleKey& key) {
  if (name == "auto")
    return make_rule_strategy(key, read_sched_tune_table(sched_tune_table_path()));
  // A known name, or one with a parameter: make_strategy names what is wrong with it.
  if (known_strategy(name) || name.starts_with("nanoflow:") || name.starts_with("single_batch:"))
    return make_strategy(name);
  throw_error(ErrorCode::kInvalidArgument, str("strategy = '", name,
                                               "': expected sequential, nanoflow[:P[:W[:K]]], "
                                               "dual_batch, single_batch[:R[:P]], tokenweave or "
                                               "auto (the rule)"));
}

}  // namespace tessera::sched
