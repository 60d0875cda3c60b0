// The plan validator: checks that a Plan computes exact attention and is safe to run on any
// backend, without running any math. It proves, for every rank and step:
//   coverage   every (Q token, KV token, query head) block that the mask leaves visible is
//              computed exactly once in the whole plan, and no unmasked compute touches a
//              block that the mask hides partly;
//   data       every compute, merge, finalize and transfer reads data that some earlier
//              step (in the happens-before order of streams, deps, transfers, signals and
//              barriers) put there, and the data is what the step says it expects: the
//              right tokens and heads of the right tensor;
//   reuse      no region is written while another step may still read or write it
//              (conflicting accesses must be ordered);
//   outputs    every finalized row holds each needed KV block exactly once, and each rank
//              ends with the finalized O of its own image tokens and of all joint tokens,
//              all heads, with every remote write into its buffers landed before it ends;
//   structure  ids, slots (a slot id names the same buffer on every rank), regions, byte
//              counts, link classes, two-sided matching (same stream on both sides, same
//              order per pair), collective and barrier groups, signal counts, GQA head
//              mapping; and that the plan cannot deadlock.
// Messages name the rank, the step (index, kind, note) and what was wrong.
//
// How: tokens are grouped into atoms (positions that every run of the plan treats alike), so
// coverage is counted on (q atom, kv atom, head) cells; then the plan is executed abstractly
// with vector clocks (one component per rank and stream), tracking what every slot region
// holds (token run, first head, and for partial states the count of each KV atom folded in).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/sp/plan.h"

namespace tessera::sp {

struct ValidationReport {
  std::vector<std::string> errors;
  int64_t blocks_needed = 0;    // (q atom, kv atom, head) cells the mask leaves visible
  int64_t blocks_computed = 0;  // compute cells counted (with repetitions)
  int num_atoms = 0;

  bool ok() const { return errors.empty(); }
  // The first `max_errors` errors, one per line, and how many more there were.
  std::string to_string(size_t max_errors = 20) const;
};

// Throws Error(kUnsupported) for a plan too large to check: more than 2^28 tokens, or more than
// 2^27 (q atom, kv atom, head) cells (its memory grows with both).
ValidationReport validate_plan(const Plan& plan);

// Throws Error(kInternal) with the report when the plan is invalid.
void check_plan(const Plan& plan);

}  // namespace tessera::sp
