// The strategy rule (DynaFlow's per-step choice, calibrated by measurement): no strategy wins
// everywhere (docs/PERF.md), so `auto` runs, per step, the strategy measured fastest for steps
// of about that many rows and that mix of decodes and prompts on this GPU, model width and
// tensor-parallel degree, and sequential where nothing was measured within a factor of 2 of the
// step's rows. The mix is the positions the step's sequences had cached (what its attention
// reads besides its rows) per row: at 8192 rows a decode-heavy step and a prefill-heavy one
// want different strategies.
// The measurements come from `tessera bench sched --tune-table FILE`, a tab-separated text file,
// one (case, strategy) per line:
//   gpu <TAB> ranks <TAB> hidden <TAB> tokens <TAB> cached <TAB> strategy <TAB> median_us
// (a table written before the cached column, six columns, reads with the mix unknown).
// The file is TESSERA_SCHED_TUNE_TABLE, else $XDG_CACHE_HOME/tessera/sched_tune.tsv, else
// ~/.cache/tessera/sched_tune.tsv.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/sched/schedule.h"

namespace tessera::sched {

struct SchedTuneEntry {
  std::string gpu;
  int ranks = 0;
  int64_t hidden = 0;
  int64_t tokens = 0;
  std::string strategy;
  double median_us = 0;
  int64_t cached = -1;  // the step's cached positions; -1: not recorded
};

// What the rule's measurements must match: the GPU's name, the tensor-parallel degree and the
// model's hidden size (a stand-in for its GEMM shapes).
struct RuleKey {
  std::string gpu;
  int ranks = 1;
  int64_t hidden = 0;
};

std::string sched_tune_table_path();
// Rows of the file at `path`; a missing file is an empty table. Malformed lines (an unknown
// strategy among them) throw kInvalidArgument naming the file, the line and what was expected.
std::vector<SchedTuneEntry> read_sched_tune_table(const std::string& path);
// Writes `entries`, replacing rows of the same gpu, ranks, hidden, tokens, cached and strategy.
void write_sched_tune_table(const std::string& path, const std::vector<SchedTuneEntry>& entries);

// The strategy the rule picks for a step of `tokens` rows with `cached` positions cached (-1:
// unknown): among `key`'s rows at the measured token count nearest in log scale (within a
// factor of 2), those of the recorded mix nearest the step's (cached positions per row, in log
// scale of 1 + that; rows without a mix only where none has one, or the step's is unknown), the
// fastest; "sequential" otherwise.
std::string pick_strategy(const std::vector<SchedTuneEntry>& table, const RuleKey& key,
                          int64_t tokens, int64_t cached = -1);

// The "auto" strategy: pick_strategy per step, then that strategy's split and schedule (the
// same pick for both: it depends only on the step's rows and cached positions).
std::unique_ptr<Strategy> make_rule_strategy(RuleKey key, std::vector<SchedTuneEntry> table);

// A strategy by name for a model run as `key` says: "auto" is the rule with the table at
// sched_tune_table_path(), any other name make_strategy's (kInvalidArgument naming the known
// ones, auto among them, otherwise).
std::unique_ptr<Strategy> make_named_strategy(const std::string& name, const RuleKey& key);

}  // namespace tessera::sched
