// Fuzzes the tensor-parallel tuner's table file (src/tp/tune_table.cc): the input is the file.
// Reading must return rows inside their declared ranges or throw tessera::Error naming the file
// and line; rows read must write and read back the same; a lookup of a row's own case must find
// a row of that case. A crash, UB, another exception or a broken round trip is a finding.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/tp/tune_table.h"

using namespace tessera;

namespace {

bool same_case(const tp::TpTuneEntry& a, const tp::TpTuneEntry& b) {
  return a.gpu == b.gpu && a.world_size == b.world_size && a.num_machines == b.num_machines &&
         a.op == b.op && a.n == b.n && a.k == b.k && a.m == b.m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::TableFiles files("tp_tune", data, size);
  const std::string& input = files.input;
  const std::string& copy = files.copy;
  std::vector<tp::TpTuneEntry> rows;
  try {
    rows = tp::read_tp_tune_table(input);
  } catch (const Error&) {
    return 0;  // a malformed line, named
  } catch (const std::exception& e) {
    fuzz::fail(std::string("read_tp_tune_table threw a non-tessera exception: ") + e.what());
  }
  for (const tp::TpTuneEntry& e : rows)
    if (e.world_size < 1 || e.num_machines < 1 || e.n < 1 || e.k < 1 || e.m < 1 ||
        !(std::isfinite(e.fused_us) && e.fused_us > 0) ||
        !(std::isfinite(e.unfused_us) && e.unfused_us > 0))
      fuzz::fail("read_tp_tune_table returned a row outside its ranges: M " +
                 std::to_string(e.m) + ", ranks " + std::to_string(e.world_size));
  // Later rows of the same case replace earlier ones when written: compare with the last.
  std::vector<tp::TpTuneEntry> expected;
  for (const tp::TpTuneEntry& e : rows) {
    std::erase_if(expected, [&](const tp::TpTuneEntry& o) { return same_case(o, e); });
    expected.push_back(e);
  }
  std::remove(copy.c_str());  // the writer merges into what is there
  try {
    tp::write_tp_tune_table(copy, rows);
  } catch (const Error&) {
    return 0;  // a name that would not read back is refused by name
  }
  const std::vector<tp::TpTuneEntry> again = tp::read_tp_tune_table(copy);
  if (again.size() != expected.size())
    fuzz::fail("the written table reads back a different row count");
  for (size_t i = 0; i < again.size(); ++i)
    if (!same_case(again[i], expected[i]) ||
        !fuzz::same_time(again[i].fused_us, expected[i].fused_us) ||
        !fuzz::same_time(again[i].unfused_us, expected[i].unfused_us))
      fuzz::fail("row " + std::to_string(i) + " does not read back as written");
  if (!rows.empty()) {
    const tp::TpTuneEntry& probe = rows[rows.size() / 2];
    tp::TpRequest r;
    r.op = probe.op;
    r.world_size = probe.world_size;
    r.num_machines = probe.num_machines;
    r.n = probe.n;
    r.k = probe.k;
    r.m = probe.m;
    const auto found = tp::tuned_row(rows, probe.gpu, r);
    if (!found || found->m != probe.m)
      fuzz::fail("tuned_row found no row for a case in the table");
  }
  return 0;
}
