#include "sim/chrome_trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "support/status_macros.h"

namespace spillway::sim {
namespace {

using ::nlohmann::json;
using program::InstructionKind;
using program::Stream;
using ::testing::ElementsAre;
using ::testing::SizeIs;

// x -> relu "r1" -> relu "r2". r1 is spilled to the host and fetched back,
// then recomputed; the timings are picked by hand so every event's microsecond
// times are known exactly.
struct Fixture {
  ir::Graph graph{"two_relus"};
  program::Program program;
  SimulationResult result;
  ir::NodeId r1 = ir::kNoNode;
  ir::NodeId r2 = ir::kNoNode;

  Fixture() {
    const ir::ValueId x = graph.AddInput("x", ir::F32({256, 1024}));
    absl::StatusOr<ir::NodeId> first = graph.AddNode(ir::OpKind::kRelu, {x}, {}, "r1");
    EXPECT_TRUE(first.ok()) << StatusMessage(first.status());
    r1 = first.ok() ? *first : ir::kNoNode;
    absl::StatusOr<ir::NodeId> second =
        graph.AddNode(ir::OpKind::kRelu, {graph.FindValue("r1").value_or(x)}, {}, "r2");
    EXPECT_TRUE(second.ok()) << StatusMessage(second.status());
    r2 = second.ok() ? *second : ir::kNoNode;

    program.graph = &graph;
    program.schedule = {r1, r2};
    constexpr int64_t kBytes = 1 << 20;
    AddBuffer("x", program::Memory::kDevice, true);              // 0
    AddBuffer("r1", program::Memory::kDevice, false);            // 1
    AddBuffer("r1@host", program::Memory::kHost, false);         // 2
    AddBuffer("r2", program::Memory::kDevice, false);            // 3
    AddBuffer("r1@fetch", program::Memory::kDevice, false);      // 4
    AddBuffer("r1@recompute", program::Memory::kDevice, false);  // 5
    program.arena_bytes = 4 * kBytes;
    program.host_bytes = kBytes;

    // kind, stream, node, buffer, reads, writes, waits, record, step; start and end in ms.
    Add({InstructionKind::kAlloc, Stream::kCompute, ir::kNoNode, 0, {}, {}, {}, -1, -1}, 0, 0);
    Add({InstructionKind::kAlloc, Stream::kCompute, ir::kNoNode, 1, {}, {}, {}, -1, 0}, 0, 0);
    Add({InstructionKind::kCompute, Stream::kCompute, r1, program::kNoBuffer, {0}, {1}, {}, 0, 0},
        0, 1);
    Add({InstructionKind::kCopyToHost,
         Stream::kDeviceToHost,
         ir::kNoNode,
         program::kNoBuffer,
         {1},
         {2},
         {0},
         1,
         0},
        1, 1.5);
    Add({InstructionKind::kFree, Stream::kDeviceToHost, ir::kNoNode, 1, {}, {}, {1}, -1, 0}, 1.5,
        1.5);
    Add({InstructionKind::kAlloc, Stream::kCompute, ir::kNoNode, 3, {}, {}, {}, -1, 1}, 1, 1);
    Add({InstructionKind::kCompute, Stream::kCompute, r2, program::kNoBuffer, {1}, {3}, {}, -1, 1},
        1, 3);
    Add({InstructionKind::kAlloc, Stream::kHostToDevice, ir::kNoNode, 4, {}, {}, {}, -1, 1}, 2, 2);
    Add({InstructionKind::kCopyToDevice,
         Stream::kHostToDevice,
         ir::kNoNode,
         program::kNoBuffer,
         {2},
         {4},
         {},
         -1,
         1},
        2, 2.5);
    Add({InstructionKind::kAlloc, Stream::kCompute, ir::kNoNode, 5, {}, {}, {}, -1, 2}, 3, 3);
    Add({InstructionKind::kRecompute,
         Stream::kCompute,
         r1,
         program::kNoBuffer,
         {0},
         {5},
         {},
         -1,
         2},
        3, 4.25);
    program.num_events = 2;

    result.step_time_s = 4.25e-3;
    result.memory = {{0, 2 * kBytes},
                     {1e-3, 3 * kBytes},
                     {1.5e-3, 2 * kBytes},
                     {2e-3, 3 * kBytes},
                     {3e-3, 4 * kBytes}};
    result.peak_bytes = 4 * kBytes;
    result.peak_time_s = 3e-3;
  }

  void AddBuffer(std::string name, program::Memory memory, bool persistent) {
    program::Buffer buffer;
    buffer.id = static_cast<program::BufferId>(program.buffers.size());
    buffer.given_name = std::move(name);
    buffer.bytes = 1 << 20;
    buffer.memory = memory;
    buffer.persistent = persistent;
    program.buffers.push_back(std::move(buffer));
  }

  void Add(program::Instruction instruction, double start_ms, double end_ms) {
    program.instructions.push_back(std::move(instruction));
    result.timings.push_back({start_ms * 1e-3, end_ms * 1e-3});
  }
};

json Parse(const std::string& text) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << text;
  return parsed;
}

std::vector<json> EventsWithPhase(const json& trace, std::string_view phase) {
  std::vector<json> events;
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == phase) events.push_back(event);
  }
  return events;
}

TEST(ChromeTraceTest, IsAnObjectWithTraceEventsAndDisplayTimeUnit) {
  Fixture f;
  const json trace = Parse(ChromeTraceJson(f.program, f.result, "two relus"));
  ASSERT_TRUE(trace.is_object());
  EXPECT_TRUE(trace.at("traceEvents").is_array());
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  EXPECT_DOUBLE_EQ(trace.at("otherData").at("step_time_ms").get<double>(), 4.25);
  EXPECT_EQ(trace.at("otherData").at("peak_bytes"), 4 << 20);
  // Every event names its process; Perfetto drops events without a pid.
  for (const json& event : trace.at("traceEvents")) {
    EXPECT_EQ(event.at("pid"), 1) << event.dump();
    EXPECT_TRUE(event.contains("tid")) << event.dump();
  }
}

TEST(ChromeTraceTest, OneCompleteEventPerTimedInstructionWithMicrosecondTimes) {
  Fixture f;
  const json trace = Parse(ChromeTraceJson(f.program, f.result, "two relus"));
  const std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_THAT(complete, SizeIs(5));

  struct Expected {
    std::string name, cat;
    int tid;
    double ts, dur;
  };
  const std::vector<Expected> expected = {
      {"r1", "compute", 1, 0, 1000},
      {"r1@host", "copy_to_host", 2, 1000, 500},
      {"r2", "compute", 1, 1000, 2000},
      {"r1@fetch", "copy_to_device", 3, 2000, 500},
      {"recompute r1", "recompute", 1, 3000, 1250},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(complete[i].at("name"), expected[i].name);
    EXPECT_EQ(complete[i].at("cat"), expected[i].cat);
    EXPECT_EQ(complete[i].at("tid"), expected[i].tid);
    EXPECT_NEAR(complete[i].at("ts").get<double>(), expected[i].ts, 1e-6);
    EXPECT_NEAR(complete[i].at("dur").get<double>(), expected[i].dur, 1e-6);
  }
}

TEST(ChromeTraceTest, TimesAreRoundedToNanosecondsSoTheTextStaysShort) {
  Fixture f;
  f.result.timings[2] = {1e-3 / 3, 2e-3 / 3};
  const std::string text = ChromeTraceJson(f.program, f.result, "two relus");
  // The duration is taken between the rounded ends (666667 - 333333 ns), so
  // back-to-back events still meet exactly.
  EXPECT_THAT(text, ::testing::HasSubstr("\"dur\":333.334,"));
  EXPECT_THAT(text, ::testing::HasSubstr("\"ts\":333.333}"));
  const json trace = Parse(text);
  const std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_THAT(complete, SizeIs(5));
  EXPECT_DOUBLE_EQ(complete[0].at("ts").get<double>(), 333.333);
  EXPECT_DOUBLE_EQ(complete[0].at("dur").get<double>(), 333.334);
}

TEST(ChromeTraceTest, ArgsHoldBytesStepAndOp) {
  Fixture f;
  const json trace = Parse(ChromeTraceJson(f.program, f.result, "two relus"));
  const std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_THAT(complete, SizeIs(5));
  const json& compute = complete[0].at("args");
  EXPECT_EQ(compute.at("op"), "relu");
  EXPECT_EQ(compute.at("step"), 0);
  EXPECT_EQ(compute.at("bytes"), 1 << 20);
  const json& recompute = complete[4].at("args");
  EXPECT_EQ(recompute.at("op"), "relu");
  EXPECT_EQ(recompute.at("step"), 2);
  const json& fetch = complete[3].at("args");
  EXPECT_EQ(fetch.at("bytes"), 1 << 20);
  EXPECT_EQ(fetch.at("step"), 1);
  EXPECT_EQ(fetch.at("from"), "r1@host");
  EXPECT_EQ(fetch.at("to"), "r1@fetch");
  EXPECT_FALSE(fetch.contains("op"));
}

TEST(ChromeTraceTest, ProcessAndThreadsAreNamedAndSorted) {
  Fixture f;
  const json trace = Parse(ChromeTraceJson(f.program, f.result, "resnet50 / swap-all"));
  std::map<int, std::string> thread_names;
  std::map<int, int> sort_index;
  std::string process_name;
  for (const json& event : EventsWithPhase(trace, "M")) {
    if (event.at("name") == "process_name") process_name = event.at("args").at("name");
    if (event.at("name") == "thread_name") {
      thread_names[event.at("tid").get<int>()] = event.at("args").at("name");
    }
    if (event.at("name") == "thread_sort_index") {
      sort_index[event.at("tid").get<int>()] = event.at("args").at("sort_index");
    }
  }
  EXPECT_EQ(process_name, "resnet50 / swap-all");
  EXPECT_THAT(thread_names, ElementsAre(std::pair{1, std::string("compute")},
                                        std::pair{2, std::string("d2h (device to host)")},
                                        std::pair{3, std::string("h2d (host to device)")}));
  EXPECT_THAT(sort_index, ElementsAre(std::pair{1, 0}, std::pair{2, 1}, std::pair{3, 2}));
}

TEST(ChromeTraceTest, SeveralTimelinesAreProcessesSideBySide) {
  // The fixture's timeline, and the same Program twice as slow (a measured
  // step beside its prediction): one process each, in the order given, with
  // the same tracks, every instruction on each, and each one's figures.
  Fixture f;
  SimulationResult slower = f.result;
  for (InstructionTiming& timing : slower.timings) {
    timing.start_s *= 2;
    timing.end_s *= 2;
  }
  slower.step_time_s *= 2;
  const std::array<TraceProcess, 2> processes = {TraceProcess{"measured", &slower},
                                                 TraceProcess{"simulated", &f.result}};
  const json trace = Parse(ChromeTraceJson(f.program, processes));
  std::map<int, std::string> process_names;
  std::map<int, int> complete_events;
  std::map<int, double> last_end_us;
  for (const json& event : trace.at("traceEvents")) {
    const int pid = event.at("pid");
    if (event.at("ph") == "M" && event.at("name") == "process_name") {
      process_names[pid] = event.at("args").at("name");
    }
    if (event.at("ph") == "X") {
      ++complete_events[pid];
      last_end_us[pid] =
          std::max(last_end_us[pid], event.at("ts").get<double>() + event.at("dur").get<double>());
    }
  }
  EXPECT_THAT(process_names, ElementsAre(std::pair{1, std::string("measured")},
                                         std::pair{2, std::string("simulated")}));
  EXPECT_THAT(complete_events, ElementsAre(std::pair{1, 5}, std::pair{2, 5}));
  EXPECT_DOUBLE_EQ(last_end_us[1], 2 * last_end_us[2]);
  const json& other = trace.at("otherData");
  EXPECT_DOUBLE_EQ(other.at("step_time_ms").get<double>(), 8.5);  // the first timeline's
  ASSERT_THAT(other.at("processes"), SizeIs(2));
  EXPECT_EQ(other.at("processes")[0].at("title"), "measured");
  EXPECT_DOUBLE_EQ(other.at("processes")[0].at("step_time_ms").get<double>(), 8.5);
  EXPECT_EQ(other.at("processes")[1].at("title"), "simulated");
  EXPECT_DOUBLE_EQ(other.at("processes")[1].at("step_time_ms").get<double>(), 4.25);
  // One timeline alone is the single-process trace, with no list.
  const json single = Parse(ChromeTraceJson(f.program, std::span(processes).last(1)));
  EXPECT_FALSE(single.at("otherData").contains("processes"));
  EXPECT_EQ(single.dump(), Parse(ChromeTraceJson(f.program, f.result, "simulated")).dump());
}

TEST(ChromeTraceTest, AllocsAndFreesAreInstantEventsOnTheirStream) {
  Fixture f;
  const json trace = Parse(ChromeTraceJson(f.program, f.result, "two relus"));
  const std::vector<json> instants = EventsWithPhase(trace, "i");
  ASSERT_THAT(instants, SizeIs(6));
  EXPECT_EQ(instants[0].at("name"), "alloc x");
  EXPECT_EQ(instants[0].at("s"), "t");
  const json& free = instants[2];
  EXPECT_EQ(free.at("name"), "free r1");
  EXPECT_EQ(free.at("cat"), "free");
  EXPECT_EQ(free.at("tid"), 2);
  EXPECT_NEAR(free.at("ts").get<double>(), 1500, 1e-6);
  EXPECT_FALSE(free.contains("dur"));
  EXPECT_EQ(instants[3].at("name"), "alloc r2");
}

TEST(ChromeTraceTest, CounterTrackFollowsTheMemoryCurve) {
  Fixture f;
  const json trace = Parse(ChromeTraceJson(f.program, f.result, "two relus"));
  std::vector<std::pair<double, int64_t>> points;
  for (const json& event : EventsWithPhase(trace, "C")) {
    EXPECT_EQ(event.at("name"), "device memory");
    points.emplace_back(event.at("ts").get<double>(),
                        event.at("args").at("allocated").get<int64_t>());
  }
  constexpr int64_t kMiB = 1 << 20;
  ASSERT_THAT(points, SizeIs(5));
  const std::vector<std::pair<double, int64_t>> expected = {
      {0, 2 * kMiB}, {1000, 3 * kMiB}, {1500, 2 * kMiB}, {2000, 3 * kMiB}, {3000, 4 * kMiB}};
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_NEAR(points[i].first, expected[i].first, 1e-6);
    EXPECT_EQ(points[i].second, expected[i].second);
  }
}

TEST(ChromeTraceTest, NamesWithQuotesAndBadUtf8StayValidJson) {
  Fixture f;
  f.graph.mutable_node(f.r2).name = "r2 \"quoted\"\n\\";
  f.program.buffers[4].given_name = "r1@fetch\xff";
  const std::string text = ChromeTraceJson(f.program, f.result, "title with \"quotes\" <&>");
  const json trace = Parse(text);
  ASSERT_TRUE(trace.is_object());
  const std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_THAT(complete, SizeIs(5));
  EXPECT_EQ(complete[2].at("name"), "r2 \"quoted\"\n\\");
  // The invalid byte becomes U+FFFD rather than aborting the export.
  EXPECT_EQ(complete[3].at("name"), "r1@fetch\xEF\xBF\xBD");
  EXPECT_EQ(EventsWithPhase(trace, "M").front().at("args").at("name"), "title with \"quotes\" <&>");
}

TEST(ChromeTraceTest, AnEmptyProgramGivesOnlyTheTrackNames) {
  ir::Graph graph;
  program::Program program;
  program.graph = &graph;
  const json trace = Parse(ChromeTraceJson(program, SimulationResult{}, "empty"));
  ASSERT_TRUE(trace.is_object());
  EXPECT_THAT(EventsWithPhase(trace, "M"), SizeIs(2 + 2 * program::kNumStreams));
  EXPECT_THAT(trace.at("traceEvents"), SizeIs(2 + 2 * program::kNumStreams));
}

}  // namespace
}  // namespace spillway::sim
