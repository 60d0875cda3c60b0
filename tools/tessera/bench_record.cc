#include "bench_record.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "tessera/core/error.h"

namespace tessera::cli {

namespace {
std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
}  // namespace

std::string current_commit() {
  if (const char* c = std::getenv("TESSERA_COMMIT"); c && *c) return c;
  std::string out;
  if (FILE* p = popen("git rev-parse --short HEAD 2>/dev/null", "r")) {
    char buf[64] = {0};
    if (std::fgets(buf, sizeof buf, p)) out = buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::string current_date() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

void write_bench_json(const std::string& path, const std::vector<BenchRecord>& records) {
  std::ofstream f(path);
  TESSERA_CHECK(f.good(), ErrorCode::kSystem, "cannot open --json file '", path, "' for writing");
  const std::string commit = current_commit();
  const std::string date = current_date();
  f << "[\n";
  for (size_t i = 0; i < records.size(); ++i) {
    const BenchRecord& r = records[i];
    f << "  {\"bench\": \"" << json_escape(r.bench) << "\", \"case\": \"" << json_escape(r.case_name)
      << "\", \"impl\": \"" << json_escape(r.impl) << "\", \"gpu\": \"" << json_escape(r.gpu)
      << "\", \"num_gpus\": " << r.num_gpus << ", \"topology\": \"" << json_escape(r.topology)
      << "\", \"median_us\": " << json_number(r.median_us);
    if (r.tflops >= 0) f << ", \"tflops\": " << json_number(r.tflops);
    if (r.gbps >= 0) f << ", \"gbps\": " << json_number(r.gbps);
    f << ", \"ok\": " << (r.ok ? "true" : "false");
    for (const auto& [k, v] : r.extra) f << ", \"" << json_escape(k) << "\": " << json_number(v);
    for (const auto& [k, v] : r.extra_text)
      f << ", \"" << json_escape(k) << "\": \"" << json_escape(v) << "\"";
    f << ", \"commit\": \"" << commit << "\", \"date\": \"" << date << "\"}"
      << (i + 1 < records.size() ? ",\n" : "\n");
  }
  f << "]\n";
  TESSERA_CHECK(f.good(), ErrorCode::kSystem, "writing --json file '", path, "' failed");
}

}  // namespace tessera::cli
