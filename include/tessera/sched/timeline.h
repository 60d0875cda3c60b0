// Where and when a scheduled step ran each operation: one span per operation (or fused group)
// of a nano-batch, on the stream it ran on, in microseconds from the step's start. The models
// record one when asked (LlamaModel::set_timeline, LlamaGpuModel::set_timeline: host clock on
// the cpu backend, events around each operation on cuda); `tessera bench sched --timeline`
// writes them as a Chrome trace (chrome://tracing, ui.perfetto.dev: a row per stream) and as an
// SVG plot (a lane per stream, boxes colored by nano-batch).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tessera/model/llama_layer.h"
#include "tessera/sched/schedule.h"

namespace tessera::sched {

struct TimelineSpan {
  int nano = 0;
  Step step;      // the first step of a fused group
  int count = 1;  // steps the span ran as one fused operation
  model::OpKind stream = model::OpKind::kCompute;
  double start_us = 0, end_us = 0;
};

struct Timeline {
  std::string label;  // what it shows: e.g. "llama3-8b tokens2048 nanoflow"
  std::vector<TimelineSpan> spans;
};

// "layer 3 qkv" (a fused group: "layer 3 o_all_reduce +1").
std::string span_name(const TimelineSpan& span);
// Chrome's trace-event JSON: a process per timeline, a thread per stream, a complete event per
// span (name span_name, args nano-batch).
std::string timeline_trace_json(std::span<const Timeline> timelines);
// An SVG document: a panel per timeline on one time axis (the longest step), a lane per stream,
// a box per span colored by its nano-batch.
std::string timeline_svg(std::span<const Timeline> timelines);
// Writes `path_prefix`.json and `path_prefix`.svg; throws kSystem naming a file it cannot write.
void write_timelines(const std::string& path_prefix, std::span<const Timeline> timelines);

}  // namespace tessera::sched
