// Reading, merging and looking up the tensor-parallel tuner's table (tune_table.h).
#include "tessera/tp/tune_table.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/params.h"

namespace tessera::tp {
namespace {

const Param<std::string> kTuneTable("TESSERA_TP_TUNE_TABLE", "",
                                    "file of measured fused/unfused tensor-parallel times "
                                    "(tessera tune tp); empty: $XDG_CACHE_HOME/tessera/tp_tune.tsv");

bool same_case(const TpTuneEntry& a, const TpTuneEntry& b) {
  return a.gpu == b.gpu && a.world_size == b.world_size && a.num_machines == b.num_machines &&
         a.op == b.op && a.n == b.n && a.k == b.k && a.m == b.m;
}

// A whole-field integer >= 1 (a range check before narrowing).
bool parse_count(const std::string& text, int64_t limit, int64_t& value) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > limit) return false;
  value = v;
  return true;
}

bool parse_us(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0' && std::isfinite(value) && value > 0;
}

}  // namespace

std::string tp_tune_table_path() {
  return user_cache_file(kTuneTable, "tp_tune.tsv");
}

std::vector<TpTuneEntry> read_tp_tune_table(const std::string& path) {
  std::vector<TpTuneEntry> out;
  std::ifstream in(path);
  if (!in) return out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string f[9];
    bool ok = true;
    for (std::string& field : f) ok = ok && bool(std::getline(fields, field, '\t'));
    TpTuneEntry e;
    int64_t ranks = 0, machines = 0;
    ok = ok && !f[0].empty() && parse_count(f[1], 1 << 20, ranks) &&
         parse_count(f[2], 1 << 20, machines) &&
         (f[3] == "ag_gemm" || f[3] == "gemm_rs" || f[3] == "gemm_a2a") &&
         parse_count(f[4], int64_t(1) << 40, e.n) && parse_count(f[5], int64_t(1) << 40, e.k) &&
         parse_count(f[6], int64_t(1) << 40, e.m) && parse_us(f[7], e.fused_us) &&
         parse_us(f[8], e.unfused_us);
    if (ok) {
      e.gpu = f[0];
      e.world_size = int(ranks);
      e.num_machines = int(machines);
      e.op = parse_tp_op(f[3]);
      out.push_back(e);
      continue;
    }
    throw_error(ErrorCode::kInvalidArgument,
                str(path, ":", number, ": '", line,
                    "': expected gpu, ranks, machines, op (ag_gemm, gemm_rs, gemm_a2a), n, k, m "
                    "(integers >= 1), fused_us, unfused_us (> 0) separated by tabs"));
  }
  return out;
}

void write_tp_tune_table(const std::string& path, const std::vector<TpTuneEntry>& entries) {
  for (const TpTuneEntry& e : entries) {
    // A tab or line break would split the row; a leading '#' would make it a comment.
    TESSERA_CHECK_ARG(!e.gpu.empty() && e.gpu.find_first_of("\t\n\r") == std::string::npos &&
                          !e.gpu.starts_with('#'),
                      "tune table entry gpu = '", e.gpu,
                      "': expected a name without tabs or line breaks, not starting with '#'");
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
  const std::filesystem::path file(path);
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  std::ofstream out(path, std::ios::trunc);
  TESSERA_CHECK(bool(out), ErrorCode::kSystem, "tune table ", path, ": cannot write");
  out << "# gpu\tranks\tmachines\top\tn\tk\tm\tfused_us\tunfused_us (tessera tune tp)\n";
  for (const TpTuneEntry& e : all) {
    out << e.gpu << '\t' << e.world_size << '\t' << e.num_machines << '\t' << tp_op_name(e.op)
        << '\t' << e.n << '\t' << e.k << '\t' << e.m << '\t' << e.fused_us << '\t'
        << e.unfused_us << '\n';
  }
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
