// Scheduled steps' timelines as a Chrome trace and an SVG plot (timeline.h).
#include "tessera/sched/timeline.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/table_file.h"

namespace tessera::sched {

namespace {

constexpr model::OpKind kStreams[] = {model::OpKind::kCompute, model::OpKind::kMemory,
                                      model::OpKind::kNetwork};

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string span_name(const TimelineSpan& span) {
  std::string name = str("layer ", span.step.layer, " ", model::llama_op_name(span.step.op));
  if (span.count > 1) name += str(" +", span.count - 1);
  return name;
}

std::string timeline_trace_json(std::span<const Timeline> timelines) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t p = 0; p < timelines.size(); ++p) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", p},
                      {"args", {{"name", timelines[p].label}}}});
    for (model::OpKind s : kStreams) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", p},
                        {"tid", int(s)},
                        {"args", {{"name", model::op_kind_name(s)}}}});
    }
    for (const TimelineSpan& span : timelines[p].spans) {
      events.push_back({{"name", span_name(span)},
                        {"ph", "X"},
                        {"pid", p},
                        {"tid", int(span.stream)},
                        {"ts", span.start_us},
                        {"dur", std::max(0.0, span.end_us - span.start_us)},
                        {"args", {{"nano_batch", span.nano}}}});
    }
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

std::string timeline_svg(std::span<const Timeline> timelines) {
  constexpr double kWidth = 1200, kLeft = 80, kLane = 18, kTitle = 20, kGap = 12, kAxis = 24;
  static const char* const kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                        "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
  double end = 0;
  for (const Timeline& t : timelines) {
    for (const TimelineSpan& s : t.spans) end = std::max(end, s.end_us);
  }
  const double scale = end > 0 ? (kWidth - kLeft - 10) / end : 0;
  const double panel = kTitle + 3 * kLane + kGap;
  const double height = double(timelines.size()) * panel + kAxis;
  std::string svg =
      str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", number(kWidth), "\" height=\"",
          number(height), "\" font-family=\"sans-serif\" font-size=\"11\">\n");
  for (size_t p = 0; p < timelines.size(); ++p) {
    const double top = double(p) * panel;
    svg += str("<text x=\"4\" y=\"", number(top + 14), "\" font-weight=\"bold\">",
               xml_escaped(timelines[p].label), "</text>\n");
    for (model::OpKind s : kStreams) {
      const double y = top + kTitle + int(s) * kLane;
      svg += str("<text x=\"4\" y=\"", number(y + 13), "\">", model::op_kind_name(s), "</text>\n");
      svg += str("<rect x=\"", number(kLeft), "\" y=\"", number(y), "\" width=\"",
                 number(kWidth - kLeft - 10), "\" height=\"", number(kLane - 2),
                 "\" fill=\"#f2f2f2\"/>\n");
    }
    for (const TimelineSpan& span : timelines[p].spans) {
      const double y = top + kTitle + int(span.stream) * kLane;
      svg += str("<rect x=\"", number(kLeft + span.start_us * scale), "\" y=\"", number(y),
                 "\" width=\"", number(std::max(0.5, (span.end_us - span.start_us) * scale)),
                 "\" height=\"", number(kLane - 2), "\" fill=\"",
                 kColors[size_t(span.nano) % std::size(kColors)], "\"><title>", span_name(span),
                 ", nano-batch ", span.nano, ": ", number(span.start_us), " to ",
                 number(span.end_us), " us</title></rect>\n");
    }
  }
  // The time axis: five ticks over the longest step.
  const double axis = double(timelines.size()) * panel;
  for (int i = 0; i <= 4; ++i) {
    const double us = end * i / 4, x = kLeft + us * scale;
    svg +=
        str("<line x1=\"", number(x), "\" y1=\"", number(axis), "\" x2=\"", number(x), "\" y2=\"",
            number(axis + 5), "\" stroke=\"black\"/><text x=\"", number(x), "\" y=\"",
            number(axis + 17), "\" text-anchor=\"middle\">", number(us), " us</text>\n");
  }
  return svg + "</svg>\n";
}

void write_timelines(const std::string& path_prefix, std::span<const Timeline> timelines) {
  write_text_file(path_prefix + ".json", timeline_trace_json(timelines), "timeline");
  write_text_file(path_prefix + ".svg", timeline_svg(timelines), "timeline");
}

}  // namespace tessera::sched
