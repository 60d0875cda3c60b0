// Partitions (schedule.h): the steps a strategy schedules, and their names.
#include <algorithm>
#include <charconv>

#include "tessera/core/error.h"
#include "tessera/sched/schedule.h"

namespace tessera::sched {

bool Partition::contains(Step step) const {
  return step.layer >= first_layer && step.layer < end_layer &&
         (ops.empty() || std::find(ops.begin(), ops.end(), step.op) != ops.end());
}

namespace {

bool parse_layer(std::string_view text, int64_t& layer) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), layer);
  return error == std::errc() && end == text.data() + text.size() && !text.empty() && layer >= 0;
}

}  // namespace

Partition parse_partition(std::string_view text) {
  const auto fail = [&]() -> Partition {
    throw_error(ErrorCode::kInvalidArgument,
                str("partition '", text,
                    "': expected layers=A-B (A to B inclusive) or layers=A, ops=OP+OP+... with "
                    "llama_op_name's names, or both joined by '/'"));
  };
  Partition p;
  bool layers_seen = false, ops_seen = false;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find('/', begin), text.size());
    const std::string_view rule = text.substr(begin, end - begin);
    if (rule.starts_with("layers=") && !layers_seen) {
      layers_seen = true;
      const std::string_view range = rule.substr(7);
      const size_t dash = range.find('-');
      int64_t first = 0, last = 0;
      const bool ok = dash == std::string_view::npos
                          ? parse_layer(range, first) && parse_layer(range, last)
                          : parse_layer(range.substr(0, dash), first) &&
                                parse_layer(range.substr(dash + 1), last);
      if (!ok || last < first) return fail();
      p.first_layer = first;
      p.end_layer = last + 1;
    } else if (rule.starts_with("ops=") && !ops_seen) {
      ops_seen = true;
      const std::string_view names = rule.substr(4);
      const std::string what = str("partition '", text, "': op");
      for (size_t b = 0; b <= names.size();) {
        const size_t e = std::min(names.find('+', b), names.size());
        p.ops.push_back(model::parse_llama_op(names.substr(b, e - b), what.c_str()));
        b = e + 1;
      }
    } else {
      return fail();
    }
    begin = end + 1;
  }
  return p;
}

}  // namespace tessera::sched
