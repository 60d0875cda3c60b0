// Fuzzes the decode tuner's table file (src/decode/tune_table.cc), the one file Tessera reads
// back today: the input is the file. Reading must return rows inside their declared ranges or
// throw tessera::Error naming the file and line; rows read must write and read back the same;
// a lookup over them must give one of their cluster sizes. A crash, UB, another exception or a
// broken round trip is a finding.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/decode/tune_table.h"

using namespace tessera;

namespace {

std::string temp_file(const char* what) {
  return "/tmp/tessera_fuzz_tune_" + std::to_string(::getpid()) + "_" + what + ".tsv";
}

bool same(const decode::TuneEntry& a, const decode::TuneEntry& b) {
  // The writer prints times to 6 significant digits.
  const double tolerance = 1e-5 * std::max(1.0, std::fabs(a.median_us));
  return a.gpu == b.gpu && a.model == b.model && a.batch == b.batch && a.context == b.context &&
         a.cluster_size == b.cluster_size && std::fabs(a.median_us - b.median_us) <= tolerance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = temp_file("in"), copy = temp_file("copy");
  {
    std::ofstream f(input, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  std::vector<decode::TuneEntry> rows;
  try {
    rows = decode::read_tune_table(input);
  } catch (const Error&) {
    return 0;  // a malformed line, named
  } catch (const std::exception& e) {
    fuzz::fail(std::string("read_tune_table threw a non-tessera exception: ") + e.what());
  }
  for (const decode::TuneEntry& e : rows)
    if (e.batch <= 0 || e.context <= 0 || e.cluster_size < 1 || e.cluster_size > 16 ||
        !std::isfinite(e.median_us) || e.median_us < 0)
      fuzz::fail("read_tune_table returned a row outside its ranges: cluster " +
                 std::to_string(e.cluster_size) + ", batch " + std::to_string(e.batch));
  // Later rows of the same shape replace earlier ones when written: compare with the last.
  std::vector<decode::TuneEntry> expected;
  for (const decode::TuneEntry& e : rows) {
    std::erase_if(expected, [&](const decode::TuneEntry& o) {
      return o.gpu == e.gpu && o.model == e.model && o.batch == e.batch && o.context == e.context;
    });
    expected.push_back(e);
  }
  std::remove(copy.c_str());
  try {
    decode::write_tune_table(copy, rows);
  } catch (const Error&) {
    return 0;  // a name that would not read back is refused by name
  }
  const std::vector<decode::TuneEntry> again = decode::read_tune_table(copy);
  if (again.size() != expected.size())
    fuzz::fail("the written table reads back a different row count");
  for (size_t i = 0; i < again.size(); ++i)
    if (!same(again[i], expected[i]))
      fuzz::fail("row " + std::to_string(i) + " does not read back as written");
  if (!rows.empty()) {
    const decode::TuneEntry& probe = rows[rows.size() / 2];
    const auto n =
        decode::tuned_cluster_size(rows, probe.gpu, probe.model, probe.batch, probe.context);
    if (!n || *n < 1 || *n > 16)
      fuzz::fail("tuned_cluster_size found no row for a shape in the table");
  }
  std::remove(input.c_str());
  std::remove(copy.c_str());
  return 0;
}
