// The tensor-parallel tuner's table: fused and unfused times measured per (GPU, ranks,
// machines, op, N, K, M), written by `tessera tune tp` and read by plan_tp() when its options
// name the GPU (TpPlanOptions::tuned_gpu) and ask it to choose (Fuse::kAuto): a measured row
// decides fusion instead of the cost model. A tab-separated text file, one case per line:
//   gpu <TAB> ranks <TAB> machines <TAB> op <TAB> n <TAB> k <TAB> m <TAB> fused_us <TAB> unfused_us
// The file is TESSERA_TP_TUNE_TABLE, else $XDG_CACHE_HOME/tessera/tp_tune.tsv, else
// ~/.cache/tessera/tp_tune.tsv. No GPU names are built in: a GPU without rows falls back to
// the cost model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/tp/request.h"

namespace tessera::tp {

struct TpTuneEntry {
  std::string gpu;
  int world_size = 0;
  int num_machines = 0;
  TpOp op = TpOp::kAllGatherGemm;
  int64_t n = 0, k = 0, m = 0;
  double fused_us = 0;
  double unfused_us = 0;
};

std::string tp_tune_table_path();
// Rows of the file at `path`; a missing file is an empty table. Malformed lines throw
// kInvalidArgument naming the file, the line and what was expected.
std::vector<TpTuneEntry> read_tp_tune_table(const std::string& path);
// Writes `entries`, replacing rows of the same gpu, ranks, machines, op, N, K and M.
void write_tp_tune_table(const std::string& path, const std::vector<TpTuneEntry>& entries);
// The row for `request` on `gpu`: same ranks, machines, op, N and K, and the M nearest in log
// scale within a factor of 2 (a row measured far from M says little about it); none else.
std::optional<TpTuneEntry> tuned_row(const std::vector<TpTuneEntry>& table, const std::string& gpu,
                                     const TpRequest& request);

}  // namespace tessera::tp
