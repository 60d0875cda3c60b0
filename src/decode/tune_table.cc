// Reading, merging and looking up the decode tuner's table (tune_table.h).
#include "tessera/decode/tune_table.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/core/table_file.h"

namespace tessera::decode {
namespace {

const Param<std::string> kTuneTable("TESSERA_DECODE_TUNE_TABLE", "",
                                    "file of tuned decode cluster sizes (tessera tune decode); "
                                    "empty: $XDG_CACHE_HOME/tessera/decode_tune.tsv");

bool same_shape(const TuneEntry& a, const TuneEntry& b) {
  return a.gpu == b.gpu && a.model == b.model && a.batch == b.batch && a.context == b.context;
}

}  // namespace

std::string tune_table_path() {
  return user_cache_file(kTuneTable, "decode_tune.tsv");
}

std::vector<TuneEntry> read_tune_table(const std::string& path) {
  std::vector<TuneEntry> out;
  for (const TableLine& line : read_table_lines(path)) {
    const std::vector<std::string>& f = line.fields;
    TuneEntry e;
    char* end = nullptr;
    if (f.size() >= 6) {
      e.gpu = f[0];
      e.model = f[1];
      constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
      const bool b_ok = parse_table_count(f[2], kMax, e.batch);
      const bool c_ok = parse_table_count(f[3], kMax, e.context);
      // Range-checked before narrowing: 4294967297 must not read as cluster size 1.
      int64_t n = 0;
      const bool n_ok = parse_table_count(f[4], 16, n);
      e.cluster_size = int(n);
      e.median_us = std::strtod(f[5].c_str(), &end);
      const bool us_ok = read_whole(f[5], end) && std::isfinite(e.median_us) && e.median_us >= 0;
      if (b_ok && c_ok && n_ok && us_ok) {
        out.push_back(e);
        continue;
      }
    }
    throw_error(ErrorCode::kInvalidArgument,
                str(path, ":", line.number, ": '", line.text,
                    "': expected gpu, model, batch, context, cluster_size (1-16), median_us "
                    "separated by tabs"));
  }
  return out;
}

void write_tune_table(const std::string& path, const std::vector<TuneEntry>& entries) {
  // Names that would not read back as written: a tab or line break splits the row, a gpu
  // name starting with '#' makes it a comment.
  for (const TuneEntry& e : entries) {
    TESSERA_CHECK_ARG(e.gpu.find_first_of("\t\n\r") == std::string::npos && !e.gpu.starts_with('#'),
                      "tune table entry gpu = '", e.gpu,
                      "': expected a name without tabs or line breaks, not starting with '#'");
    TESSERA_CHECK_ARG(e.model.find_first_of("\t\n\r") == std::string::npos, "tune table entry model = '",
                      e.model, "': expected a name without tabs or line breaks");
  }
  std::vector<TuneEntry> all = read_tune_table(path);
  for (const TuneEntry& e : entries) {
    std::erase_if(all, [&](const TuneEntry& old) { return same_shape(old, e); });
    all.push_back(e);
  }
  std::vector<std::string> rows;
  for (const TuneEntry& e : all) {
    std::ostringstream row;
    row << e.gpu << '\t' << e.model << '\t' << e.batch << '\t' << e.context << '\t'
        << e.cluster_size << '\t' << e.median_us;
    rows.push_back(row.str());
  }
  write_table_lines(path,
                    "gpu\tmodel\tbatch\tcontext\tcluster_size\tmedian_us (tessera tune decode)",
                    rows, "tune table");
}

std::optional<int> tuned_cluster_size(const std::vector<TuneEntry>& table, const std::string& gpu,
                                      const std::string& model, int64_t batch, int64_t context) {
  // The batch row: the smallest batch >= `batch`, else the largest there is.
  int64_t chosen_batch = -1, largest = -1;
  for (const TuneEntry& e : table) {
    if (e.gpu != gpu || e.model != model) continue;
    largest = std::max(largest, e.batch);
    if (e.batch >= batch && (chosen_batch < 0 || e.batch < chosen_batch)) chosen_batch = e.batch;
  }
  if (chosen_batch < 0) chosen_batch = largest;
  std::optional<int> best;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const TuneEntry& e : table) {
    if (e.gpu != gpu || e.model != model || e.batch != chosen_batch) continue;
    const double distance = std::fabs(std::log(double(e.context) / double(context)));
    if (distance < best_distance) {
      best_distance = distance;
      best = e.cluster_size;
    }
  }
  return best;
}

}  // namespace tessera::decode
