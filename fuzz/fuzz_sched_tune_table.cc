// Fuzzes the scheduler rule's table file (src/sched/rule.cc): the input is the file. Reading
// must return rows inside their declared ranges (a strategy make_strategy makes,
// nanoflow:P[:W[:K]] included) or throw tessera::Error naming the file and line; rows read must
// write and read back the same; the rule's pick at a row's own token count and mix must be a
// strategy measured there, the fastest. A crash, UB, another exception or a broken round trip is a
// finding.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tessera/core/error.h"
#include "tessera/sched/rule.h"

using namespace tessera;

namespace {

bool same_case(const sched::SchedTuneEntry& a, const sched::SchedTuneEntry& b) {
  return a.gpu == b.gpu && a.ranks == b.ranks && a.hidden == b.hidden && a.tokens == b.tokens &&
         a.cached == b.cached && a.strategy == b.strategy;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::TableFiles files("sched_tune", data, size);
  const std::string& input = files.input;
  const std::string& copy = files.copy;
  std::vector<sched::SchedTuneEntry> rows;
  try {
    rows = sched::read_sched_tune_table(input);
  } catch (const Error&) {
    return 0;  // a malformed line, named
  } catch (const std::exception& e) {
    fuzz::fail(std::string("read_sched_tune_table threw a non-tessera exception: ") + e.what());
  }
  for (const sched::SchedTuneEntry& e : rows)
    if (e.ranks < 1 || e.hidden < 1 || e.tokens < 1 || e.cached < -1 ||
        !(std::isfinite(e.median_us) && e.median_us > 0) || !sched::known_strategy(e.strategy))
      fuzz::fail("read_sched_tune_table returned a row outside its ranges: tokens " +
                 std::to_string(e.tokens) + ", strategy '" + e.strategy + "'");
  // Later rows of the same (case, strategy) replace earlier ones when written.
  std::vector<sched::SchedTuneEntry> expected;
  for (const sched::SchedTuneEntry& e : rows) {
    std::erase_if(expected, [&](const sched::SchedTuneEntry& o) { return same_case(o, e); });
    expected.push_back(e);
  }
  std::remove(copy.c_str());  // the writer merges into what is there
  try {
    sched::write_sched_tune_table(copy, rows);
  } catch (const Error&) {
    return 0;  // a name that would not read back is refused by name
  }
  const std::vector<sched::SchedTuneEntry> again = sched::read_sched_tune_table(copy);
  if (again.size() != expected.size())
    fuzz::fail("the written table reads back a different row count");
  for (size_t i = 0; i < again.size(); ++i)
    if (!same_case(again[i], expected[i]) ||
        !fuzz::same_time(again[i].median_us, expected[i].median_us))
      fuzz::fail("row " + std::to_string(i) + " does not read back as written");
  if (!expected.empty()) {
    const sched::SchedTuneEntry& probe = expected[expected.size() / 2];
    const sched::RuleKey key{probe.gpu, probe.ranks, probe.hidden};
    // At a measured (tokens, cached), the rows of that mix (all of them for an unknown mix).
    const std::string picked = sched::pick_strategy(expected, key, probe.tokens, probe.cached);
    const auto same_step = [&](const sched::SchedTuneEntry& e) {
      return e.gpu == key.gpu && e.ranks == key.ranks && e.hidden == key.hidden &&
             e.tokens == probe.tokens && (probe.cached < 0 || e.cached == probe.cached);
    };
    double fastest = 0;
    bool measured = false;
    for (const sched::SchedTuneEntry& e : expected) {
      if (!same_step(e)) continue;
      if (!measured || e.median_us < fastest) fastest = e.median_us;
      measured = true;
    }
    // Rows of other mixes may share the pick's name: one of them must be the fastest.
    const bool picked_fastest = std::any_of(expected.begin(), expected.end(), [&](const auto& e) {
      return same_step(e) && e.strategy == picked && e.median_us == fastest;
    });
    if (!picked_fastest)
      fuzz::fail("pick_strategy at a measured count did not pick its fastest strategy");
  }
  return 0;
}
