// The scheduler's timelines as a Chrome trace and an SVG plot: every span and stream appears,
// labels are escaped, a fused group is named by its first step.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/sched/timeline.h"

namespace tessera::sched {
namespace {

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<Timeline> two_timelines() {
  Timeline a{"step <1> & nanoflow", {}};
  a.spans.push_back({0, {0, model::LlamaOp::kQkv}, 1, model::OpKind::kCompute, 0, 10});
  a.spans.push_back({1, {0, model::LlamaOp::kAttention}, 1, model::OpKind::kMemory, 2, 30});
  a.spans.push_back({0, {1, model::LlamaOp::kOAllReduce}, 2, model::OpKind::kNetwork, 31, 40});
  Timeline b{"sequential", {}};
  b.spans.push_back({0, {0, model::LlamaOp::kAttnNorm}, 1, model::OpKind::kCompute, 0, 5});
  return {a, b};
}

TEST(SchedTimeline, SpansAreNamedByLayerAndOperation) {
  const std::vector<Timeline> t = two_timelines();
  EXPECT_EQ(span_name(t[0].spans[0]), "layer 0 qkv");
  EXPECT_EQ(span_name(t[0].spans[2]), "layer 1 o_all_reduce +1");
}

TEST(SchedTimeline, TheTraceHasASliceASpanAndAThreadAStream) {
  const std::vector<Timeline> t = two_timelines();
  const std::string json = timeline_trace_json(t);
  EXPECT_EQ(occurrences(json, "\"ph\":\"X\""), 4) << json;
  EXPECT_EQ(occurrences(json, "\"thread_name\""), 6);
  EXPECT_EQ(occurrences(json, "\"process_name\""), 2);
  EXPECT_NE(json.find("\"name\":\"layer 0 attention\""), std::string::npos);
  EXPECT_NE(json.find("\"dur\":28.0"), std::string::npos) << json;
  EXPECT_NE(json.find("step <1> & nanoflow"), std::string::npos);  // JSON needs no escape here
}

TEST(SchedTimeline, ThePlotHasALanePerStreamAndABoxPerSpan) {
  const std::vector<Timeline> t = two_timelines();
  const std::string svg = timeline_svg(t);
  EXPECT_EQ(occurrences(svg, "<rect"), 2 * 3 + 4) << svg;
  EXPECT_EQ(occurrences(svg, "<svg"), 1);
  EXPECT_NE(svg.find("step &lt;1&gt; &amp; nanoflow"), std::string::npos);
  EXPECT_EQ(svg.find("step <1>"), std::string::npos);
  // Boxes of one nano-batch share a color, the other nano-batch's differs.
  EXPECT_EQ(occurrences(svg, "#4e79a7\"><title>"), 3);
  EXPECT_EQ(occurrences(svg, "#f28e2b\"><title>"), 1);
}

TEST(SchedTimeline, AnEmptyTimelineStillMakesAPlot) {
  const std::vector<Timeline> none{Timeline{"nothing ran", {}}};
  EXPECT_NE(timeline_svg(none).find("nothing ran"), std::string::npos);
  EXPECT_NE(timeline_trace_json(none).find("traceEvents"), std::string::npos);
}

TEST(SchedTimeline, WritesBothFilesAndNamesOneItCannotWrite) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "tessera_timeline_test";
  std::filesystem::remove_all(dir);
  const std::vector<Timeline> t = two_timelines();
  write_timelines((dir / "step").string(), t);
  EXPECT_TRUE(std::filesystem::exists(dir / "step.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "step.svg"));
  try {
    write_timelines((dir / "step.json" / "under_a_file").string(), t);
    ADD_FAILURE() << "a timeline under a file was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kSystem);
    EXPECT_NE(std::string(e.what()).find("step.json/under_a_file.json"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::sched
