// Fuzzes the decode tuner's table file (src/decode/tune_table.cc), the one file Tessera reads
// back today: the input is the file. Reading must return rows inside their declared ranges or
// throw tessera::Error naming the file and line; rows read must write and read back the same;
// a lookup over them must give one of their cluster sizes. A crash, UB, another exception or a
// broken round trip is a finding.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/decode/tune_table.h"

using namespace tessera;

namespace {

bool same(const decode::TuneEntry& a, const decode::TuneEntry& b) {
  return a.gpu == b.gpu && a.model == b.model && a.batch == b.batch && a.context == b.context &&
         a.cluster_size == b.cluster_size && fuzz::same_time(a.median_us, b.median_us);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::TableFiles files("tune", data, size);
  const std::string& input = files.input;
  const std::string& copy = files.copy;
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
  std::remove(copy.c_str());  // the writer merges into what is there
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
  return 0;
}
