// Benchmark records in the format of DESIGN.md section 5, written as a JSON list, one object
// per measured case, so any two results can be put side by side by a script.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tessera::cli {

struct BenchRecord {
  std::string bench;     // "comm", "attn", "sp"
  std::string case_name; // readable shape string, e.g. "all_gather 64MiB"
  std::string impl;      // tessera method or the anchor's name
  std::string gpu;       // "NVIDIA H200" or "cpu"
  int num_gpus = 0;
  std::string topology;  // "1x4", "2x2 emulated"
  double median_us = 0;
  double tflops = -1;    // written when >= 0
  double gbps = -1;      // algorithm bandwidth, written when >= 0
  bool ok = false;
  std::map<std::string, double> extra;  // busbw_gbps, bytes, link, ...
  std::map<std::string, std::string> extra_text;
};

// The commit (TESSERA_COMMIT, else `git rev-parse --short HEAD`, else "unknown") and today's
// date (UTC, YYYY-MM-DD) stamped on every record.
std::string current_commit();
std::string current_date();

// Writes `records` to `path` as a JSON list (overwrites). Throws tessera::Error on I/O failure.
void write_bench_json(const std::string& path, const std::vector<BenchRecord>& records);

}  // namespace tessera::cli
