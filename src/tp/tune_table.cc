// Reading, merging and looking up the tensor-parallel tuner's table (tune_table.h).
#include "tessera/tp/tune_table.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/core/table_file.h"

namespace tessera::tp {
namespace {

const Param<std::string> kTuneTable("TESSERA_TP_TUNE_TABLE", "",
                                    "file of measured fused/unfused tensor-parallel times "
                                    "(tessera tune tp); empty: $XDG_CACHE_HOME/tessera/tp_tune.tsv");

bool same_case(const TpTuneEntry& a, const TpTuneEntry& b) {
  return a.gpu == b.gpu && a.world_size == b.world_size && a.num_machines == b.num_machines &&
         a.op == b.op && a.n == b.n && a.k == b.k && a.m == b.m;
}

}  // namespace

std::string tp_tune_table_path() {
  return user_cache_file(kTuneTable, "tp_tune.tsv");
}

std::vector<TpTuneEntry> read_tp_tune_table(const std::string& path) {
  std::vector<TpTuneEntry> out;
  for (const TableLine& line : read_table_lines(path)) {
    const std::vector<std::string>& f = line.fields;
    TpTuneEntry e;
    int64_t ranks = 0, machines = 0;
    const bool ok = f.size() >= 9 && !f[0].empty() && parse_table_count(f[1], 1 << 20, ranks) &&
                    parse_table_count(f[2], 1 << 20, machines) &&
                    (f[3] == "ag_gemm" || f[3] == "gemm_rs" || f[3] == "gemm_a2a") &&
                    parse_table_count(f[4], int64_t(1) << 40, e.n) &&
                    parse_table_count(f[5], int64_t(1) << 40, e.k) &&
                    parse_table_count(f[6], int64_t(1) << 40, e.m) &&
                    parse_table_time(f[7], e.fused_us) && parse_table_time(f[8], e.unfused_us);
    if (!ok) {
      throw_error(ErrorCode::kInvalidArgument,
                  str(path, ":", line.number, ": '", line.text,
                      "': expected gpu, ranks, machines, op (ag_gemm, gemm_rs, gemm_a2a), n, k, m "
                      "(integers >= 1), fused_us, unfused_us (> 0) separated by tabs"));
    }
    e.gpu = f[0];
    e.world_size = int(ranks);
    e.num_machines = int(machines);
    e.op = parse_tp_op(f[3]);
    out.push_back(e);
  }
  return out;
}

void write_tp_tune_table(const std::string& path, const std::vector<TpTuneEntry>& entries) {
  for (const TpTuneEntry& e : entries) {
    check_table_name(e.gpu, "tune table entry gpu");
    TESSERA_CHECK_ARG(e.world_size >= 1 && e.num_machines >= 1 && e.n >= 1 && e.k >= 1 &&
                          e.m >= 1 && e.fused_us > 0 && e.unfused_us > 0,
                      "tune table entry for ", e.gpu, " ", tp_op_name(e.op), " M", e.m,
                      ": expected sizes >= 1 and times > 0");
  }
  std::vector<TpTuneEntry> all = read_tp_tune_table(path);
  for (const TpTuneEntry& e : entries) {
    std::erase_if(all, [&](const TpTuneEntry& old) { return same_case(old, e); });
    all.push_back(e);
  }
  std::vector<std::string> rows;
  for (const TpTuneEntry& e : all) {
    std::ostringstream row;
    row << e.gpu << '\t' << e.world_size << '\t' << e.num_machines << '\t' << tp_op_name(e.op)
        << '\t' << e.n << '\t' << e.k << '\t' << e.m << '\t' << e.fused_us << '\t'
        << e.unfused_us;
    rows.push_back(row.str());
  }
  write_table_lines(path,
                    "gpu\tranks\tmachines\top\tn\tk\tm\tfused_us\tunfused_us (tessera tune tp)",
                    rows, "tune table");
}

std::optional<TpTuneEntry> tuned_row(const std::vector<TpTuneEntry>& table, const std::string& gpu,
                                     const TpRequest& request) {
  std::optional<TpTuneEntry> best;
  double best_distance = std::log(2.0) + 1e-9;
  for (const TpTuneEntry& e : table) {
    if (e.gpu != gpu || e.world_size != request.world_size ||
        e.num_machines != request.num_machines || e.op != request.op || e.n != request.n ||
        e.k != request.k)
      continue;
    const double distance = std::fabs(std::log(double(e.m) / double(request.m)));
    if (distance < best_distance) {
      best_distance = distance;
      best = e;
    }
  }
  return best;
}

}  // namespace tessera::tp
