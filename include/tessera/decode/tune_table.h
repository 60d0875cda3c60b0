// The decode tuner's table: the fastest cluster size measured per (GPU, model, batch,
// context), written by `tessera tune decode` and read when an AttentionBlock is planned with
// cluster_size = 0. A tab-separated text file, one measured shape per line:
//   gpu <TAB> model <TAB> batch <TAB> context <TAB> cluster_size <TAB> median_us
// The file is TESSERA_DECODE_TUNE_TABLE, else $XDG_CACHE_HOME/tessera/decode_tune.tsv, else
// ~/.cache/tessera/decode_tune.tsv. No GPU names or SM counts are built in: a GPU without
// rows falls back to the cost-model default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::decode {

struct TuneEntry {
  std::string gpu;
  std::string model;
  int64_t batch = 0;
  int64_t context = 0;
  int cluster_size = 0;
  double median_us = 0;
};

std::string tune_table_path();
// Rows of the file at `path`; a missing file is an empty table. Malformed lines throw
// kInvalidArgument naming the file and the line.
std::vector<TuneEntry> read_tune_table(const std::string& path);
// Writes `entries` (replacing rows of the same gpu, model, batch, context in the file).
void write_tune_table(const std::string& path, const std::vector<TuneEntry>& entries);
// The cluster size for a plan: the row of this gpu and model whose batch is the smallest
// >= batch (else the largest) and whose context is nearest in log scale; none if no row.
std::optional<int> tuned_cluster_size(const std::vector<TuneEntry>& table, const std::string& gpu,
                                      const std::string& model, int64_t batch, int64_t context);

}  // namespace tessera::decode
