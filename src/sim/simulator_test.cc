#include "sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/saved_tensors.h"
#include "autodiff/training_graph.h"
#include "ir/op_registry.h"
#include "models/models.h"
#include "program/plan.h"
#include "program/program.h"
#include "program/rewriter.h"
#include "program/test_graphs.h"
#include "support/status_macros.h"

namespace spillway::sim {
namespace {

using program::Buffer;
using program::BufferId;
using program::Instruction;
using program::InstructionKind;
using program::Memory;
using program::Program;
using program::Stream;
using program::testing::ChainText;
using program::testing::ComputeOf;
using program::testing::IndicesOf;
using program::testing::kKiB;
using program::testing::ParseOrDie;
using ::testing::ElementsAre;
using ::testing::Pair;

constexpr size_t kCompute = static_cast<size_t>(Stream::kCompute);
constexpr size_t kD2H = static_cast<size_t>(Stream::kDeviceToHost);
constexpr size_t kH2D = static_cast<size_t>(Stream::kHostToDevice);

// Fixed seconds per node, looked up by node name, and copies at a fixed
// bandwidth per direction, so that every time in these tests is a round number.
class FakeCostModel final : public analysis::CostModel {
 public:
  FakeCostModel(std::map<std::string, double> node_seconds, double d2h_bytes_per_s,
                double h2d_bytes_per_s, double default_seconds = -1,
                analysis::Contention contention = {})
      : node_seconds_(std::move(node_seconds)),
        d2h_bytes_per_s_(d2h_bytes_per_s),
        h2d_bytes_per_s_(h2d_bytes_per_s),
        default_seconds_(default_seconds),
        contention_(contention) {}

  double NodeSeconds(const ir::Graph& /*graph*/, const ir::Node& node) const override {
    auto it = node_seconds_.find(node.name);
    if (it != node_seconds_.end()) return it->second;
    if (default_seconds_ < 0) ADD_FAILURE() << "the fake cost model has no time for " << node.name;
    return default_seconds_ < 0 ? 0 : default_seconds_;
  }

  double CopySeconds(int64_t bytes, analysis::CopyDirection direction) const override {
    const double bytes_per_s =
        direction == analysis::CopyDirection::kDeviceToHost ? d2h_bytes_per_s_ : h2d_bytes_per_s_;
    return static_cast<double>(bytes) / bytes_per_s;
  }

  analysis::Contention contention() const override { return contention_; }

 private:
  std::map<std::string, double> node_seconds_;
  double d2h_bytes_per_s_;
  double h2d_bytes_per_s_;
  double default_seconds_;
  analysis::Contention contention_;
};

// The chain of test_graphs.h with a: 1 s, b: 2 s, c: 3 s, db: 4 s, da: 5 s,
// dw: 6 s. Keeping everything, the compute stream runs 1+2+3+4+5+6 = 21 s.
const std::map<std::string, double> kChainSeconds = {{"a", 1},  {"b", 2},  {"c", 3},
                                                     {"db", 4}, {"da", 5}, {"dw", 6}};
constexpr double kKeepAllSeconds = 21;

// A copy of 1 KiB (every chain tensor) takes 1 s at this bandwidth.
constexpr double kOneKiBPerSecond = 1024;

Program BuildChainProgram(const ir::Graph& graph, const program::Plan& plan) {
  absl::StatusOr<Program> built =
      program::BuildProgram(graph, program::TrainingSchedule(graph), plan);
  EXPECT_TRUE(built.ok()) << StatusMessage(built.status());
  if (!built.ok()) return Program{};
  return *std::move(built);
}

program::Plan PinnedPlan(const ir::Graph& graph) {
  program::Plan plan("pinned", graph);
  const absl::Status pinned = program::ApplyPins(graph, plan);
  EXPECT_TRUE(pinned.ok()) << StatusMessage(pinned);
  return plan;
}

// The memory curve as (time, bytes) pairs, for ElementsAre.
std::vector<std::pair<double, int64_t>> Curve(const SimulationResult& result) {
  std::vector<std::pair<double, int64_t>> curve;
  for (const MemoryPoint& point : result.memory) curve.emplace_back(point.time_s, point.bytes);
  return curve;
}

// A Program written instruction by instruction over the nodes of a graph, for
// situations the rewriter does not produce on its own.
struct HandProgram {
  explicit HandProgram(const ir::Graph& graph) { program.graph = &graph; }

  BufferId AddBuffer(std::string name, int64_t bytes, Memory memory, int64_t offset = -1,
                     bool persistent = false) {
    Buffer buffer;
    buffer.id = static_cast<BufferId>(program.buffers.size());
    buffer.given_name = std::move(name);
    buffer.bytes = bytes;
    buffer.memory = memory;
    buffer.persistent = persistent;
    buffer.offset = offset;
    program.buffers.push_back(std::move(buffer));
    if (memory == Memory::kDevice) {
      program.arena_bytes = std::max(program.arena_bytes, offset + bytes);
    } else {
      program.host_bytes += bytes;
    }
    return program.buffers.back().id;
  }

  program::EventId NewEvent() { return program.num_events++; }

  // Appends one instruction; `node` for computes, `buffer` for allocs and
  // frees, `reads` and `writes` (source and destination) for copies.
  size_t Add(InstructionKind kind, Stream stream, std::vector<program::EventId> waits,
             program::EventId record, ir::NodeId node = ir::kNoNode,
             BufferId buffer = program::kNoBuffer, std::vector<BufferId> reads = {},
             std::vector<BufferId> writes = {}) {
    Instruction instruction;
    instruction.kind = kind;
    instruction.stream = stream;
    instruction.node = node;
    instruction.buffer = buffer;
    instruction.reads.assign(reads.begin(), reads.end());
    instruction.writes.assign(writes.begin(), writes.end());
    instruction.waits.assign(waits.begin(), waits.end());
    instruction.record = record;
    program.instructions.push_back(std::move(instruction));
    return program.instructions.size() - 1;
  }
  size_t Alloc(BufferId buffer, Stream stream = Stream::kCompute,
               std::vector<program::EventId> waits = {}, program::EventId record = -1) {
    return Add(InstructionKind::kAlloc, stream, std::move(waits), record, ir::kNoNode, buffer);
  }
  size_t Free(BufferId buffer, Stream stream = Stream::kCompute,
              std::vector<program::EventId> waits = {}, program::EventId record = -1) {
    return Add(InstructionKind::kFree, stream, std::move(waits), record, ir::kNoNode, buffer);
  }
  size_t Compute(std::string_view node, std::vector<program::EventId> waits = {},
                 program::EventId record = -1) {
    const std::optional<ir::NodeId> id = program.graph->FindNode(node);
    EXPECT_TRUE(id.has_value()) << node;
    return Add(InstructionKind::kCompute, Stream::kCompute, std::move(waits), record,
               id.value_or(0));
  }
  size_t CopyToHost(BufferId from, BufferId to, std::vector<program::EventId> waits = {},
                    program::EventId record = -1) {
    return Add(InstructionKind::kCopyToHost, Stream::kDeviceToHost, std::move(waits), record,
               ir::kNoNode, program::kNoBuffer, {from}, {to});
  }
  size_t CopyToDevice(BufferId from, BufferId to, std::vector<program::EventId> waits = {},
                      program::EventId record = -1) {
    return Add(InstructionKind::kCopyToDevice, Stream::kHostToDevice, std::move(waits), record,
               ir::kNoNode, program::kNoBuffer, {from}, {to});
  }

  Program program;
};

// The invariants every simulation keeps, whatever the program: one timing per
// instruction; nothing starts before the events it waits for are recorded;
// each stream runs its non-free instructions in list order without overlap, a
// free does not start before the instructions ahead of it on its stream are
// done; computes and copies last what the cost model says, or, where it
// says they contend, at least that and at most that slowed the whole time.
void ExpectConsistentTimings(const Simulator& simulator, const Program& program,
                             const SimulationResult& result) {
  const analysis::Contention& contention = simulator.contention();
  ASSERT_EQ(result.timings.size(), program.instructions.size());
  std::vector<double> recorded(static_cast<size_t>(program.num_events), -1);
  std::vector<double> stream_done(program::kNumStreams, 0);
  double latest_end = 0;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    const InstructionTiming& timing = result.timings[i];
    SCOPED_TRACE(::testing::Message() << "instruction " << i);
    for (program::EventId event : instruction.waits) {
      const double at = recorded[static_cast<size_t>(event)];
      ASSERT_GE(at, 0) << "waits on e" << event << " before it is recorded";
      EXPECT_GE(timing.start_s, at) << "starts before e" << event;
    }
    const size_t s = static_cast<size_t>(instruction.stream);
    EXPECT_GE(timing.start_s, stream_done[s]) << "starts before its stream is free";
    double duration = 0;
    switch (instruction.kind) {
      case InstructionKind::kAlloc:
      case InstructionKind::kFree:
        break;
      case InstructionKind::kCompute:
      case InstructionKind::kRecompute:
        duration = simulator.node_seconds(instruction.node);
        break;
      case InstructionKind::kCopyToHost:
        duration = simulator.copy_seconds(program.buffer(instruction.reads[0]).bytes,
                                          analysis::CopyDirection::kDeviceToHost);
        break;
      case InstructionKind::kCopyToDevice:
        duration = simulator.copy_seconds(program.buffer(instruction.reads[0]).bytes,
                                          analysis::CopyDirection::kHostToDevice);
        break;
    }
    // end = start + duration in doubles: the difference is exact up to
    // rounding at the magnitude of the end time.
    const double rounding = 1e-12 * std::max(1.0, timing.end_s);
    if (contention.any()) {
      const double slowdown = instruction.kind == InstructionKind::kCompute ||
                                      instruction.kind == InstructionKind::kRecompute
                                  ? contention.compute_slowdown
                                  : contention.copy_slowdown;
      EXPECT_GE(timing.end_s - timing.start_s, duration - rounding);
      EXPECT_LE(timing.end_s - timing.start_s, duration * (1 + slowdown) + rounding);
    } else {
      EXPECT_NEAR(timing.end_s - timing.start_s, duration, rounding);
    }
    if (instruction.record != program::kNoEvent) {
      recorded[static_cast<size_t>(instruction.record)] = timing.end_s;
    }
    if (instruction.kind != InstructionKind::kFree) stream_done[s] = timing.end_s;
    latest_end = std::max(latest_end, timing.end_s);
  }
  EXPECT_DOUBLE_EQ(result.step_time_s, latest_end);
  // Every compute stall is charged to one cause.
  const SimulationResult::ComputeStalls& causes = result.compute_stalls;
  EXPECT_NEAR(causes.fetch_s + causes.memory_s + causes.spill_s + causes.other_s,
              result.streams[static_cast<size_t>(program::Stream::kCompute)].stall_s,
              1e-12 * std::max(1.0, result.step_time_s));
}

// ---------------------------------------------------------------------------
// Compute only.

TEST(Simulator, ComputeOnlyStepTimeIsTheSumOfNodeTimes) {
  const ir::Graph graph = ParseOrDie(ChainText());
  const Program program = BuildChainProgram(graph, program::Plan("none", graph));
  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(program);

  // Everything runs on the compute stream, back to back: 1+2+3+4+5+6 = 21 s,
  // all of it busy, none of it waiting.
  EXPECT_DOUBLE_EQ(result.step_time_s, kKeepAllSeconds);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, kKeepAllSeconds);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 0);
  EXPECT_EQ(result.streams[kD2H].instructions, 0);
  EXPECT_EQ(result.streams[kH2D].instructions, 0);
  EXPECT_EQ(result.d2h_bytes, 0);
  EXPECT_EQ(result.h2d_bytes, 0);
  EXPECT_EQ(result.recompute_flops, 0);
  EXPECT_DOUBLE_EQ(result.recompute_s, 0);
  // The six nodes start at 0, 1, 3, 6, 10 and 15 s.
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "a")].start_s, 0);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "b")].start_s, 1);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "c")].start_s, 3);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "db")].start_s, 6);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "da")].start_s, 10);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "dw")].start_s, 15);
  // What stays at the end: the parameter w and the output dw, 2 KiB, from the
  // moment dw is done (21 s) and its last readers' buffers are freed.
  ASSERT_FALSE(result.memory.empty());
  EXPECT_EQ(result.memory.front().time_s, 0);
  EXPECT_EQ(result.memory.back().bytes, 2 * kKiB);
  EXPECT_DOUBLE_EQ(result.memory.back().time_s, kKeepAllSeconds);
  // When c is made (3 s), w, a, b and c are all resident: at least 4 KiB,
  // whether or not the gradients are then written over dead inputs (the exact
  // curve of a hand-written program is checked below); never above the arena.
  EXPECT_GE(result.peak_bytes, 4 * kKiB);
  EXPECT_LE(result.peak_bytes, program.arena_bytes);
  ExpectConsistentTimings(simulator, program, result);
}

TEST(Simulator, ComputeOnlyMemoryCurveFollowsAllocsAndFrees) {
  // The keep-all chain written by hand with one fresh buffer per value, each
  // freed right after its last reader (no buffer is reused in place):
  //   alloc w, a; a; alloc b; b; alloc c; c; alloc db; db; free c;
  //   alloc da; da; free db, b; alloc dw; dw; free a, da.
  const ir::Graph graph = ParseOrDie(ChainText());
  HandProgram hand(graph);
  const BufferId w = hand.AddBuffer("w", kKiB, Memory::kDevice, 0, /*persistent=*/true);
  const BufferId a = hand.AddBuffer("a", kKiB, Memory::kDevice, 1 * kKiB);
  const BufferId b = hand.AddBuffer("b", kKiB, Memory::kDevice, 2 * kKiB);
  const BufferId c = hand.AddBuffer("c", kKiB, Memory::kDevice, 3 * kKiB);
  const BufferId db = hand.AddBuffer("db", kKiB, Memory::kDevice, 4 * kKiB);
  const BufferId da = hand.AddBuffer("da", kKiB, Memory::kDevice, 3 * kKiB);
  const BufferId dw = hand.AddBuffer("dw", kKiB, Memory::kDevice, 2 * kKiB);
  hand.Alloc(w);
  hand.Alloc(a);
  hand.Compute("a");
  hand.Alloc(b);
  hand.Compute("b");
  hand.Alloc(c);
  hand.Compute("c");
  hand.Alloc(db);
  hand.Compute("db");
  hand.Free(c);
  hand.Alloc(da);
  hand.Compute("da");
  hand.Free(db);
  hand.Free(b);
  hand.Alloc(dw);
  hand.Compute("dw");
  hand.Free(a);
  hand.Free(da);

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(hand.program);

  EXPECT_DOUBLE_EQ(result.step_time_s, kKeepAllSeconds);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, kKeepAllSeconds);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 0);
  // 7 allocs and 6 computes; the 5 frees hold up nothing and are not counted.
  EXPECT_EQ(result.streams[kCompute].instructions, 13);
  // a runs 0-1, b 1-3, c 3-6, db 6-10, da 10-15, dw 15-21. Allocs happen when
  // the stream reaches them, frees right after the last reader:
  //   0 s: w + a                    2 KiB
  //   1 s: + b                      3 KiB
  //   3 s: + c                      4 KiB
  //   6 s: + db                     5 KiB  (the peak: w, a, b, c, db)
  //  10 s: - c + da                 5 KiB  (the free counts first: never 6)
  //  15 s: - db - b + dw            4 KiB
  //  21 s: - a - da                 2 KiB  (w and the output dw stay)
  EXPECT_THAT(Curve(result), ElementsAre(Pair(0, 2 * kKiB), Pair(1, 3 * kKiB), Pair(3, 4 * kKiB),
                                         Pair(6, 5 * kKiB), Pair(10, 5 * kKiB), Pair(15, 4 * kKiB),
                                         Pair(21, 2 * kKiB)));
  EXPECT_EQ(result.peak_bytes, 5 * kKiB);
  EXPECT_DOUBLE_EQ(result.peak_time_s, 6);
  ExpectConsistentTimings(simulator, hand.program, result);
}

// ---------------------------------------------------------------------------
// Spills.

TEST(Simulator, ASpillWhoseCopiesAreHiddenCostsNoTime) {
  // a is spilled and fetched back before step 3 (db), long before dw reads it
  // at step 5. Copies take 1 s each way (1 KiB at 1 KiB/s):
  //   compute: a 0-1, b 1-3, c 3-6, db 6-10, da 10-15, dw 15-21
  //   d2h:     a -> a@host 1-2 (waits for a)
  //   h2d:     a@host -> a@fetch 6-7 (issued when the compute stream
  //            reaches step 3, i.e. when c ends)
  // a's free waits for the d2h copy (2 s) but its stream reaches it at 3 s,
  // after b; c reuses a's bytes and waits on that free, at 3 s, when the
  // stream is there anyway. dw waits for the fetch, done at 7 s, so it starts
  // at 15 s as before: the step still takes 21 s.
  const ir::Graph graph = ParseOrDie(ChainText());
  program::Plan plan("manual", graph);
  plan.Spill(*graph.FindValue("a"), /*fetch_step=*/3);
  const Program program = BuildChainProgram(graph, plan);
  ASSERT_EQ(IndicesOf(program, InstructionKind::kCopyToHost).size(), 1u);
  ASSERT_EQ(IndicesOf(program, InstructionKind::kCopyToDevice).size(), 1u);
  const size_t out = IndicesOf(program, InstructionKind::kCopyToHost)[0];
  const size_t in = IndicesOf(program, InstructionKind::kCopyToDevice)[0];

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(program);

  EXPECT_DOUBLE_EQ(result.step_time_s, kKeepAllSeconds);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, kKeepAllSeconds);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 0);
  EXPECT_DOUBLE_EQ(result.timings[out].start_s, 1);
  EXPECT_DOUBLE_EQ(result.timings[out].end_s, 2);
  EXPECT_DOUBLE_EQ(result.timings[in].start_s, 6);
  EXPECT_DOUBLE_EQ(result.timings[in].end_s, 7);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "dw")].start_s, 15);
  // One tensor of 1 KiB each way, one second on each copy stream.
  EXPECT_EQ(result.d2h_bytes, kKiB);
  EXPECT_EQ(result.h2d_bytes, kKiB);
  EXPECT_DOUBLE_EQ(result.streams[kD2H].busy_s, 1);
  EXPECT_DOUBLE_EQ(result.streams[kH2D].busy_s, 1);
  EXPECT_EQ(result.streams[kD2H].instructions, 1);

  // The same program with everything kept takes exactly as long.
  const Program keep_all = BuildChainProgram(graph, program::Plan("none", graph));
  EXPECT_DOUBLE_EQ(simulator.Run(keep_all).step_time_s, result.step_time_s);
  ExpectConsistentTimings(simulator, program, result);
}

TEST(Simulator, ALateFetchStallsTheComputeStream) {
  // The program of the test above, on a link that brings data back at
  // 64 B/s: the 1 KiB fetch takes 16 s. It is issued at step 3, when c ends
  // at t=6 (the spill, 1-2 s, has long landed), so it ends at 22 s. dw's
  // stream is ready at 15 s (after da) but dw waits for the fetch: 7 s of
  // stall, and the step takes 21 + 7 = 28 s.
  const ir::Graph graph = ParseOrDie(ChainText());
  program::Plan plan("manual", graph);
  plan.Spill(*graph.FindValue("a"), /*fetch_step=*/3);
  const Program program = BuildChainProgram(graph, plan);
  ASSERT_EQ(IndicesOf(program, InstructionKind::kCopyToDevice).size(), 1u);
  const size_t in = IndicesOf(program, InstructionKind::kCopyToDevice)[0];

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, /*h2d_bytes_per_s=*/64);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(program);

  EXPECT_DOUBLE_EQ(result.timings[in].start_s, 6);
  EXPECT_DOUBLE_EQ(result.timings[in].end_s, 22);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "da")].end_s, 15);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "dw")].start_s, 22);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 7);
  EXPECT_DOUBLE_EQ(result.compute_stalls.fetch_s, 7);  // all of it waits for the fetch
  EXPECT_DOUBLE_EQ(result.compute_stalls.memory_s, 0);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, kKeepAllSeconds);
  EXPECT_DOUBLE_EQ(result.step_time_s, kKeepAllSeconds + 7);
  EXPECT_EQ(result.h2d_bytes, kKiB);
  EXPECT_DOUBLE_EQ(result.streams[kH2D].busy_s, 16);
  ExpectConsistentTimings(simulator, program, result);
}

TEST(Simulator, BeforeLayoutTheStepAndTheLiveBytesBoundTheLaidOutProgram) {
  // ResNet-18 with every spillable saved tensor spilled and fetched just in
  // time: arena reuse makes fetches' allocs wait on frees, which only the
  // layout adds. StepSeconds is Run's step time; without the layout the step
  // is shorter, and the bytes live at once in program order (the same with
  // or without offsets) are at most the arena.
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet18", 512);
  const ir::Graph& graph = training.graph;
  program::Plan plan("manual", graph);
  for (const ir::Value& value : graph.values()) {
    if (program::CanSpill(graph, value.id)) plan.Spill(value.id, -1);
  }
  const Program laid_out = BuildChainProgram(graph, plan);
  absl::StatusOr<Program> rewritten =
      program::Rewrite(graph, program::TrainingSchedule(graph), plan);
  ASSERT_TRUE(rewritten.ok()) << StatusMessage(rewritten.status());

  const analysis::RooflineCostModel cost(analysis::HardwarePresets().front());
  const Simulator simulator(graph, cost);
  EXPECT_EQ(simulator.StepSeconds(laid_out), simulator.Run(laid_out).step_time_s);
  EXPECT_EQ(simulator.StepSeconds(*rewritten), simulator.Run(*rewritten).step_time_s);
  EXPECT_LT(simulator.StepSeconds(*rewritten), simulator.StepSeconds(laid_out));
  EXPECT_EQ(program::LiveBytesPeak(*rewritten), program::LiveBytesPeak(laid_out));
  EXPECT_LE(program::LiveBytesPeak(laid_out), laid_out.arena_bytes);
}

TEST(Simulator, AJustInTimeFetchIsExposedInFull) {
  // a pinned "spill", fetched just in time: the fetch is issued before dw
  // (step 5), after da's buffers are freed, and the arena is tight, so a@fetch
  // takes bytes freed when da ends (15 s): its alloc waits on that free. The
  // fetch, 4 s at 256 B/s, runs 15-19 and dw waits for it: 4 s of stall, a
  // 25 s step.
  const ir::Graph graph = ParseOrDie(ChainText("spill"));
  const Program program = BuildChainProgram(graph, PinnedPlan(graph));
  ASSERT_EQ(IndicesOf(program, InstructionKind::kCopyToDevice).size(), 1u);
  const size_t in = IndicesOf(program, InstructionKind::kCopyToDevice)[0];

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, /*h2d_bytes_per_s=*/256);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(program);

  EXPECT_DOUBLE_EQ(result.timings[in].start_s, 15);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "dw")].start_s, 19);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 4);
  EXPECT_DOUBLE_EQ(result.step_time_s, kKeepAllSeconds + 4);
  EXPECT_EQ(result.d2h_bytes, kKiB);
  EXPECT_EQ(result.h2d_bytes, kKiB);
  ExpectConsistentTimings(simulator, program, result);
}

// ---------------------------------------------------------------------------
// Recomputation.

TEST(Simulator, ARecomputeAddsItsNodeTimeAndFlops) {
  // b is recomputed from a before da reads it: one more run of b (2 s) on the
  // compute stream, 21 + 2 = 23 s, with no waiting.
  const ir::Graph graph = ParseOrDie(ChainText("", "recompute"));
  const Program program = BuildChainProgram(graph, PinnedPlan(graph));
  ASSERT_EQ(IndicesOf(program, InstructionKind::kRecompute).size(), 1u);
  const size_t recompute = IndicesOf(program, InstructionKind::kRecompute)[0];

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(program);

  const ir::NodeId b = *graph.FindNode("b");
  const int64_t b_flops = ir::NodeCost(graph, graph.node(b)).flops;
  EXPECT_GT(b_flops, 0);
  EXPECT_EQ(result.recompute_flops, b_flops);
  EXPECT_DOUBLE_EQ(result.recompute_s, 2);
  EXPECT_DOUBLE_EQ(result.step_time_s, kKeepAllSeconds + 2);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, kKeepAllSeconds + 2);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 0);
  // db runs 6-10, then the recompute of b 10-12, then da 12-17 and dw 17-23.
  EXPECT_DOUBLE_EQ(result.timings[recompute].start_s, 10);
  EXPECT_DOUBLE_EQ(result.timings[recompute].end_s, 12);
  EXPECT_DOUBLE_EQ(result.timings[ComputeOf(program, "da")].start_s, 12);
  EXPECT_EQ(result.d2h_bytes, 0);
  EXPECT_EQ(result.h2d_bytes, 0);
  ExpectConsistentTimings(simulator, program, result);
}

TEST(Simulator, RecomputingTwoNodesCountsBoth) {
  // b and c are both recomputed before db (c needs b): 2 + 3 = 5 s more, and
  // the FLOPs of both relus.
  const ir::Graph graph = ParseOrDie(ChainText("", "recompute", "recompute"));
  const Program program = BuildChainProgram(graph, PinnedPlan(graph));
  ASSERT_EQ(IndicesOf(program, InstructionKind::kRecompute).size(), 2u);

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(program);

  const int64_t flops = ir::NodeCost(graph, graph.node(*graph.FindNode("b"))).flops +
                        ir::NodeCost(graph, graph.node(*graph.FindNode("c"))).flops;
  EXPECT_EQ(result.recompute_flops, flops);
  EXPECT_DOUBLE_EQ(result.recompute_s, 5);
  EXPECT_DOUBLE_EQ(result.step_time_s, kKeepAllSeconds + 5);
  ExpectConsistentTimings(simulator, program, result);
}

// ---------------------------------------------------------------------------
// Copy engines.

// x (4 KiB) is copied out while y (3 KiB, already on the host) is copied in;
// at 1 KiB/s the copy out takes 4 s and the copy in 3 s, and neither waits on
// anything.
struct TwoCopies {
  explicit TwoCopies(const ir::Graph& graph) : hand(graph) {
    const BufferId x = hand.AddBuffer("x", 4 * kKiB, Memory::kDevice, 0, /*persistent=*/true);
    const BufferId x_host = hand.AddBuffer("x@host", 4 * kKiB, Memory::kHost);
    const BufferId y_host = hand.AddBuffer("y@host", 3 * kKiB, Memory::kHost);
    const BufferId y = hand.AddBuffer("y@fetch", 3 * kKiB, Memory::kDevice, 4 * kKiB);
    hand.Alloc(x);
    out = hand.CopyToHost(x, x_host);
    hand.Alloc(y, Stream::kHostToDevice);
    in = hand.CopyToDevice(y_host, y);
  }
  HandProgram hand;
  size_t out = 0;
  size_t in = 0;
};

TEST(Simulator, TwoCopyEnginesOverlapTheDirections) {
  const ir::Graph graph = ParseOrDie(ChainText());
  const TwoCopies copies(graph);
  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost, SimulatorOptions{.copy_engines = 2});
  const SimulationResult result = simulator.Run(copies.hand.program);
  // Out 0-4 and in 0-3 at the same time: the step is the longer, 4 s.
  EXPECT_DOUBLE_EQ(result.timings[copies.out].start_s, 0);
  EXPECT_DOUBLE_EQ(result.timings[copies.out].end_s, 4);
  EXPECT_DOUBLE_EQ(result.timings[copies.in].start_s, 0);
  EXPECT_DOUBLE_EQ(result.timings[copies.in].end_s, 3);
  EXPECT_DOUBLE_EQ(result.step_time_s, 4);
  EXPECT_DOUBLE_EQ(result.streams[kH2D].stall_s, 0);
  EXPECT_EQ(result.d2h_bytes, 4 * kKiB);
  EXPECT_EQ(result.h2d_bytes, 3 * kKiB);
  ExpectConsistentTimings(simulator, copies.hand.program, result);
}

TEST(Simulator, OneCopyEngineSerializesTheDirections) {
  const ir::Graph graph = ParseOrDie(ChainText());
  const TwoCopies copies(graph);
  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost, SimulatorOptions{.copy_engines = 1});
  const SimulationResult result = simulator.Run(copies.hand.program);
  // The copy out comes first in the program and takes the engine 0-4; the
  // copy in, ready at 0, queues behind it: 4-7. The step takes 4 + 3 = 7 s
  // and the h2d stream waits 4 s.
  EXPECT_DOUBLE_EQ(result.timings[copies.out].start_s, 0);
  EXPECT_DOUBLE_EQ(result.timings[copies.out].end_s, 4);
  EXPECT_DOUBLE_EQ(result.timings[copies.in].start_s, 4);
  EXPECT_DOUBLE_EQ(result.timings[copies.in].end_s, 7);
  EXPECT_DOUBLE_EQ(result.step_time_s, 7);
  EXPECT_DOUBLE_EQ(result.streams[kH2D].stall_s, 4);
  EXPECT_DOUBLE_EQ(result.streams[kH2D].busy_s, 3);
  EXPECT_DOUBLE_EQ(result.streams[kD2H].busy_s, 4);
  // The bytes moved do not depend on the engines.
  EXPECT_EQ(result.d2h_bytes, 4 * kKiB);
  EXPECT_EQ(result.h2d_bytes, 3 * kKiB);
  ExpectConsistentTimings(simulator, copies.hand.program, result);
}

TEST(Simulator, OneCopyEngineServesCopiesInProgramOrder) {
  // The engine is first come, first served in program order (simulator.h):
  // a copy out that must wait for a (0-1 s) is listed before a copy in that
  // could start at once. With one engine the copy out runs 1-5 and the copy
  // in queues behind it, 5-8; with two the copy in runs 0-3.
  const ir::Graph graph = ParseOrDie(ChainText());
  HandProgram hand(graph);
  const program::EventId a_done = hand.NewEvent();
  const BufferId w = hand.AddBuffer("w", kKiB, Memory::kDevice, 0, /*persistent=*/true);
  const BufferId x = hand.AddBuffer("x", 4 * kKiB, Memory::kDevice, kKiB);
  const BufferId x_host = hand.AddBuffer("x@host", 4 * kKiB, Memory::kHost);
  const BufferId y_host = hand.AddBuffer("y@host", 3 * kKiB, Memory::kHost);
  const BufferId y = hand.AddBuffer("y@fetch", 3 * kKiB, Memory::kDevice, 5 * kKiB);
  hand.Alloc(w);
  hand.Alloc(x);
  hand.Compute("a", {}, a_done);
  const size_t out = hand.CopyToHost(x, x_host, {a_done});
  hand.Alloc(y, Stream::kHostToDevice);
  const size_t in = hand.CopyToDevice(y_host, y);

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator one(graph, cost, SimulatorOptions{.copy_engines = 1});
  const SimulationResult shared = one.Run(hand.program);
  EXPECT_DOUBLE_EQ(shared.timings[out].start_s, 1);
  EXPECT_DOUBLE_EQ(shared.timings[in].start_s, 5);
  EXPECT_DOUBLE_EQ(shared.step_time_s, 8);
  ExpectConsistentTimings(one, hand.program, shared);

  const Simulator two(graph, cost, SimulatorOptions{.copy_engines = 2});
  const SimulationResult separate = two.Run(hand.program);
  EXPECT_DOUBLE_EQ(separate.timings[out].start_s, 1);
  EXPECT_DOUBLE_EQ(separate.timings[in].start_s, 0);
  EXPECT_DOUBLE_EQ(separate.step_time_s, 5);
}

// ---------------------------------------------------------------------------
// Frees and allocs.

TEST(Simulator, AWaitingFreeHoldsUpOnlyTheAllocThatWaitsOnIt) {
  // x (1 KiB) is copied to the host, 0-5 s at 1 KiB/5 s. Its free waits for
  // the copy, so it takes effect at 5 s; a (1 s) comes after the free on the
  // compute stream but does not wait for it: it runs 0-1. y (2 KiB) reuses
  // x's bytes, so its alloc waits on the free: 5 s, a 4 s stall after a.
  // b (2 s) follows the alloc on the stream: 5-7.
  const ir::Graph graph = ParseOrDie(ChainText());
  HandProgram hand(graph);
  const program::EventId copied = hand.NewEvent();
  const program::EventId freed = hand.NewEvent();
  const BufferId x = hand.AddBuffer("x", kKiB, Memory::kDevice, 0);
  const BufferId x_host = hand.AddBuffer("x@host", kKiB, Memory::kHost);
  const BufferId y = hand.AddBuffer("y", 2 * kKiB, Memory::kDevice, 0);
  hand.Alloc(x);
  const size_t copy = hand.CopyToHost(x, x_host, {}, copied);
  const size_t free = hand.Free(x, Stream::kCompute, {copied}, freed);
  const size_t a = hand.Compute("a");
  const size_t alloc = hand.Alloc(y, Stream::kCompute, {freed});
  const size_t b = hand.Compute("b");
  hand.Free(y);

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond / 5, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(hand.program);

  EXPECT_DOUBLE_EQ(result.timings[copy].end_s, 5);
  EXPECT_DOUBLE_EQ(result.timings[free].start_s, 5);
  EXPECT_DOUBLE_EQ(result.timings[free].end_s, 5);
  EXPECT_DOUBLE_EQ(result.timings[a].start_s, 0);  // not held up by the free
  EXPECT_DOUBLE_EQ(result.timings[a].end_s, 1);
  EXPECT_DOUBLE_EQ(result.timings[alloc].start_s, 5);  // waits on the free
  EXPECT_DOUBLE_EQ(result.timings[b].start_s, 5);      // held up by the alloc
  EXPECT_DOUBLE_EQ(result.timings[b].end_s, 7);
  EXPECT_DOUBLE_EQ(result.step_time_s, 7);
  // The compute stream waits 1-5 s for the alloc: 4 s. It is busy 1 + 2 s.
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 4);
  // ... for the bytes x still holds: a memory stall, not a fetch.
  EXPECT_DOUBLE_EQ(result.compute_stalls.memory_s, 4);
  EXPECT_DOUBLE_EQ(result.compute_stalls.fetch_s, 0);
  EXPECT_DOUBLE_EQ(result.compute_stalls.spill_s + result.compute_stalls.other_s, 0);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, 3);
  // x is held until the copy lets it go at 5 s, when y takes over (1 -> 2
  // KiB); y goes once b is done (7 s).
  EXPECT_THAT(Curve(result), ElementsAre(Pair(0, kKiB), Pair(5, 2 * kKiB), Pair(7, 0)));
  EXPECT_EQ(result.peak_bytes, 2 * kKiB);
  EXPECT_DOUBLE_EQ(result.peak_time_s, 5);
  ExpectConsistentTimings(simulator, hand.program, result);
}

TEST(Simulator, FreesCountBeforeAllocsAtTheSameInstant) {
  // x (1 KiB) lives until a is done (0-1 s). An alloc of y (2 KiB) on the
  // h2d stream waits for a too and is listed before x's free, so both changes
  // fall at t=1 with the alloc first in the list. Counting the free first,
  // memory goes 1 KiB -> 2 KiB at 1 s, never 3 KiB. y is freed after b
  // (1-3 s).
  const ir::Graph graph = ParseOrDie(ChainText());
  HandProgram hand(graph);
  const program::EventId a_done = hand.NewEvent();
  const BufferId x = hand.AddBuffer("x", kKiB, Memory::kDevice, 0);
  const BufferId y = hand.AddBuffer("y", 2 * kKiB, Memory::kDevice, kKiB);
  hand.Alloc(x);
  hand.Compute("a", {}, a_done);
  const size_t alloc = hand.Alloc(y, Stream::kHostToDevice, {a_done});
  const size_t free = hand.Free(x);
  hand.Compute("b");
  hand.Free(y);

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(hand.program);

  ASSERT_LT(alloc, free);
  EXPECT_DOUBLE_EQ(result.timings[alloc].start_s, 1);
  EXPECT_DOUBLE_EQ(result.timings[free].start_s, 1);
  // One point per instant, with the total after every change at it.
  EXPECT_THAT(Curve(result), ElementsAre(Pair(0, kKiB), Pair(1, 2 * kKiB), Pair(3, 0)));
  EXPECT_EQ(result.peak_bytes, 2 * kKiB);
  EXPECT_DOUBLE_EQ(result.peak_time_s, 1);
  ExpectConsistentTimings(simulator, hand.program, result);
}

TEST(Simulator, ThePeakIsWhereTheTotalFirstReachesItsMaximum) {
  // w, x and y (1 KiB each) make 3 KiB from 0 s; x and y are freed after a
  // (0-1 s), leaving 1 KiB; z (2 KiB) is allocated after b (1-3 s): 3 KiB
  // again at 3 s; u (1 KiB) after c (3-6 s): 4 KiB at 6 s, the peak.
  const ir::Graph graph = ParseOrDie(ChainText());
  HandProgram hand(graph);
  const BufferId w = hand.AddBuffer("w", kKiB, Memory::kDevice, 0, /*persistent=*/true);
  const BufferId x = hand.AddBuffer("x", kKiB, Memory::kDevice, kKiB);
  const BufferId y = hand.AddBuffer("y", kKiB, Memory::kDevice, 2 * kKiB);
  const BufferId z = hand.AddBuffer("z", 2 * kKiB, Memory::kDevice, kKiB);
  const BufferId u = hand.AddBuffer("u", kKiB, Memory::kDevice, 3 * kKiB);
  hand.Alloc(w);
  hand.Alloc(x);
  hand.Alloc(y);
  hand.Compute("a");  // 0-1
  hand.Free(x);
  hand.Free(y);
  hand.Compute("b");  // 1-3
  hand.Alloc(z);
  hand.Compute("c");  // 3-6
  hand.Alloc(u);
  hand.Compute("db");  // 6-10

  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  const SimulationResult result = simulator.Run(hand.program);
  EXPECT_THAT(Curve(result),
              ElementsAre(Pair(0, 3 * kKiB), Pair(1, kKiB), Pair(3, 3 * kKiB), Pair(6, 4 * kKiB)));
  EXPECT_EQ(result.peak_bytes, 4 * kKiB);
  EXPECT_DOUBLE_EQ(result.peak_time_s, 6);
  EXPECT_DOUBLE_EQ(result.step_time_s, 10);

  // Without u the peak, 3 KiB, is first reached at 0 s, not again at 3 s.
  hand.program.instructions.erase(hand.program.instructions.begin() + 9);
  const SimulationResult without_u = simulator.Run(hand.program);
  EXPECT_EQ(without_u.peak_bytes, 3 * kKiB);
  EXPECT_DOUBLE_EQ(without_u.peak_time_s, 0);
}

// Calls `check` for every pin combination of the chain (each of a, b, c
// kept, spilled or recomputed) with one and with two copy engines: 54
// programs, each traced by its pins.
void ForEveryPinnedChainProgram(
    const std::function<void(const ir::Graph&, const Program&, int engines)>& check) {
  for (const char* pin_a : {"", "spill", "recompute"}) {
    for (const char* pin_b : {"", "spill", "recompute"}) {
      for (const char* pin_c : {"", "spill", "recompute"}) {
        const ir::Graph graph = ParseOrDie(ChainText(pin_a, pin_b, pin_c));
        const Program program = BuildChainProgram(graph, PinnedPlan(graph));
        for (int engines : {1, 2}) {
          SCOPED_TRACE(::testing::Message() << "pins '" << pin_a << "' '" << pin_b << "' '" << pin_c
                                            << "', " << engines << " copy engines");
          check(graph, program, engines);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Contention between copies and kernels.

// a (1 s) then b (2 s) on the compute stream while x (4 KiB: 4 s alone)
// is copied out from the start.
struct KernelsBesideACopy {
  explicit KernelsBesideACopy(const ir::Graph& graph) : hand(graph) {
    const BufferId x = hand.AddBuffer("x", 4 * kKiB, Memory::kDevice, 0, /*persistent=*/true);
    const BufferId x_host = hand.AddBuffer("x@host", 4 * kKiB, Memory::kHost);
    hand.Alloc(x);
    a = hand.Compute("a");
    b = hand.Compute("b");
    copy = hand.CopyToHost(x, x_host);
  }
  HandProgram hand;
  size_t a = 0;
  size_t b = 0;
  size_t copy = 0;
};

TEST(Simulator, ACopyAndAKernelSlowEachOtherOnlyWhileTheyOverlap) {
  const ir::Graph graph = ParseOrDie(ChainText());
  const KernelsBesideACopy k(graph);
  {
    // Each at half its rate while both run: a ends at 2 (1 s of work), the
    // copy has done 1 s of its 4; b runs 2-6 at half rate and the copy does
    // 2 s more meanwhile; its last second runs alone, 6-7.
    const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond, -1,
                             {.compute_slowdown = 1, .copy_slowdown = 1});
    const Simulator simulator(graph, cost);
    const SimulationResult result = simulator.Run(k.hand.program);
    EXPECT_DOUBLE_EQ(result.timings[k.a].end_s, 2);
    EXPECT_DOUBLE_EQ(result.timings[k.b].start_s, 2);
    EXPECT_DOUBLE_EQ(result.timings[k.b].end_s, 6);
    EXPECT_DOUBLE_EQ(result.timings[k.copy].start_s, 0);
    EXPECT_DOUBLE_EQ(result.timings[k.copy].end_s, 7);
    EXPECT_DOUBLE_EQ(result.step_time_s, 7);
    EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, 6);
    EXPECT_DOUBLE_EQ(result.streams[kD2H].busy_s, 7);
    ExpectConsistentTimings(simulator, k.hand.program, result);
  }
  {
    // Only kernels slowed (by 3x): a and b run at a third of their rate for
    // the 4 s the copy runs, doing 4/3 s of their 3 s; the rest, 5/3 s, alone.
    const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond, -1,
                             {.compute_slowdown = 2, .copy_slowdown = 0});
    const Simulator simulator(graph, cost);
    const SimulationResult result = simulator.Run(k.hand.program);
    EXPECT_DOUBLE_EQ(result.timings[k.a].end_s, 3);
    EXPECT_DOUBLE_EQ(result.timings[k.copy].end_s, 4);
    EXPECT_DOUBLE_EQ(result.timings[k.b].end_s, 4 + 5.0 / 3);
    ExpectConsistentTimings(simulator, k.hand.program, result);
  }
  {
    // Without contention the three take their times alone.
    const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
    const Simulator simulator(graph, cost);
    const SimulationResult result = simulator.Run(k.hand.program);
    EXPECT_DOUBLE_EQ(result.timings[k.b].end_s, 3);
    EXPECT_DOUBLE_EQ(result.timings[k.copy].end_s, 4);
  }
}

TEST(Simulator, ContentionAloneTimesEveryProgramAsTheOnePassDoes) {
  // A slowdown too small to matter runs the programs through the
  // contention model's clock, which must then give the one-pass timings:
  // the same streams, events, engine queue and frees, every instruction.
  const FakeCostModel independent(kChainSeconds, 128, 128);
  const FakeCostModel negligible(kChainSeconds, 128, 128, -1,
                                 {.compute_slowdown = 1e-13, .copy_slowdown = 1e-13});
  int compared = 0;
  ForEveryPinnedChainProgram([&](const ir::Graph& graph, const Program& program, int engines) {
    const SimulatorOptions options{.copy_engines = engines};
    const SimulationResult one_pass = Simulator(graph, independent, options).Run(program);
    const Simulator clocked(graph, negligible, options);
    const SimulationResult result = clocked.Run(program);
    ExpectConsistentTimings(clocked, program, result);
    ASSERT_EQ(result.timings.size(), one_pass.timings.size());
    for (size_t i = 0; i < result.timings.size(); ++i) {
      EXPECT_NEAR(result.timings[i].start_s, one_pass.timings[i].start_s, 1e-9) << i;
      EXPECT_NEAR(result.timings[i].end_s, one_pass.timings[i].end_s, 1e-9) << i;
    }
    EXPECT_EQ(result.peak_bytes, one_pass.peak_bytes);
    EXPECT_NEAR(result.streams[kCompute].stall_s, one_pass.streams[kCompute].stall_s, 1e-9);
    ++compared;
  });
  EXPECT_EQ(compared, 54);
}

TEST(Simulator, AccountingARunsOwnTimesGivesBackTheRun) {
  // Account is Run's bookkeeping without Run's clock: handed the timings a
  // run produced, it must give back every figure of that run (stalls and
  // what they waited for, busy time, bytes, FLOPs, the memory curve and its
  // peak), on every pin combination of the chain, with contention too.
  const FakeCostModel independent(kChainSeconds, 128, 96);
  const FakeCostModel contended(kChainSeconds, 128, 96, -1,
                                {.compute_slowdown = 0.5, .copy_slowdown = 0.25});
  int compared = 0;
  ForEveryPinnedChainProgram([&](const ir::Graph& graph, const Program& program, int engines) {
    for (const FakeCostModel* cost : {&independent, &contended}) {
      const Simulator simulator(graph, *cost, SimulatorOptions{.copy_engines = engines});
      const SimulationResult run = simulator.Run(program);
      const SimulationResult accounted = simulator.Account(program, run.timings);
      EXPECT_EQ(accounted.step_time_s, run.step_time_s);
      for (size_t s = 0; s < run.streams.size(); ++s) {
        EXPECT_EQ(accounted.streams[s].busy_s, run.streams[s].busy_s) << s;
        EXPECT_EQ(accounted.streams[s].stall_s, run.streams[s].stall_s) << s;
        EXPECT_EQ(accounted.streams[s].instructions, run.streams[s].instructions) << s;
      }
      EXPECT_EQ(accounted.compute_stalls.fetch_s, run.compute_stalls.fetch_s);
      EXPECT_EQ(accounted.compute_stalls.memory_s, run.compute_stalls.memory_s);
      EXPECT_EQ(accounted.compute_stalls.spill_s, run.compute_stalls.spill_s);
      EXPECT_EQ(accounted.d2h_bytes, run.d2h_bytes);
      EXPECT_EQ(accounted.h2d_bytes, run.h2d_bytes);
      EXPECT_EQ(accounted.recompute_flops, run.recompute_flops);
      EXPECT_EQ(accounted.recompute_s, run.recompute_s);
      EXPECT_EQ(accounted.peak_bytes, run.peak_bytes);
      EXPECT_EQ(accounted.peak_time_s, run.peak_time_s);
      ASSERT_EQ(accounted.memory.size(), run.memory.size());
      for (size_t k = 0; k < run.memory.size(); ++k) {
        EXPECT_EQ(accounted.memory[k].time_s, run.memory[k].time_s) << k;
        EXPECT_EQ(accounted.memory[k].bytes, run.memory[k].bytes) << k;
      }
      ++compared;
    }
  });
  EXPECT_EQ(compared, 108);
}

TEST(Simulator, AccountingMeasuredTimesChargesTheGapsAsStalls) {
  // Times that no cost model gave: the chain's keep-everything Program with
  // every instruction 1 s long, one after the other, and 2 s of idle before
  // the last compute. The compute stream's stall is those 2 s (nothing it
  // waits for is late, so "other"), its busy time one second per compute,
  // and the step ends with the last instruction.
  const ir::Graph graph = ParseOrDie(ChainText());
  const Program program = BuildChainProgram(graph, program::Plan("keep", graph));
  const FakeCostModel cost(kChainSeconds, kOneKiBPerSecond, kOneKiBPerSecond);
  const Simulator simulator(graph, cost);
  std::vector<InstructionTiming> timings(program.instructions.size());
  std::vector<size_t> computes = IndicesOf(program, InstructionKind::kCompute);
  ASSERT_GE(computes.size(), 2u);
  double now = 0;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const bool compute = program.instructions[i].kind == InstructionKind::kCompute;
    if (i == computes.back()) now += 2;
    timings[i] = {now, compute ? now + 1 : now};
    if (compute) now += 1;
  }
  const SimulationResult result = simulator.Account(program, timings);
  EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, static_cast<double>(computes.size()));
  EXPECT_DOUBLE_EQ(result.streams[kCompute].stall_s, 2);
  EXPECT_DOUBLE_EQ(result.compute_stalls.other_s, 2);
  EXPECT_DOUBLE_EQ(result.step_time_s, now);
  EXPECT_EQ(result.d2h_bytes, 0);
}

// ---------------------------------------------------------------------------
// Invariants.

TEST(Simulator, TimingsFollowStreamsAndEventsOnChainPrograms) {
  // Every pin combination of the chain, with both engine counts and a slow
  // link both ways, keeps the invariants of ExpectConsistentTimings.
  const FakeCostModel cost(kChainSeconds, /*d2h_bytes_per_s=*/128, /*h2d_bytes_per_s=*/128);
  ForEveryPinnedChainProgram([&](const ir::Graph& graph, const Program& program, int engines) {
    const Simulator simulator(graph, cost, SimulatorOptions{.copy_engines = engines});
    const SimulationResult result = simulator.Run(program);
    ExpectConsistentTimings(simulator, program, result);
    // Every node runs once on the compute stream, plus the recomputes;
    // nothing is faster than that.
    EXPECT_DOUBLE_EQ(result.streams[kCompute].busy_s, kKeepAllSeconds + result.recompute_s);
    EXPECT_GE(result.step_time_s, result.streams[kCompute].busy_s);
    EXPECT_LE(result.peak_bytes, program.arena_bytes);
  });
}

TEST(Simulator, TimingsFollowStreamsAndEventsOnAModel) {
  models::ModelOptions options;
  options.height = options.width = 32;
  options.classes = 10;
  absl::StatusOr<ir::Graph> forward = models::BuildModel("resnet18", options);
  ASSERT_TRUE(forward.ok()) << StatusMessage(forward.status());
  absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
  ASSERT_TRUE(training.ok()) << StatusMessage(training.status());
  const ir::Graph& graph = training->graph;

  // Every saved tensor spilled (recomputed where it can be, every other one),
  // so that all three streams have work.
  program::Plan plan("mixed", graph);
  bool recompute = false;
  for (const autodiff::SavedTensor& saved : autodiff::SavedTensors(graph)) {
    if (!program::CanSpill(graph, saved.value)) continue;
    if (recompute && program::CanRecompute(graph, saved.value)) {
      plan.Recompute(saved.value);
    } else {
      plan.Spill(saved.value);
    }
    recompute = !recompute;
  }
  const Program program = BuildChainProgram(graph, plan);
  ASSERT_FALSE(program.instructions.empty());

  // Device bytes allocated and never freed.
  int64_t never_freed = 0;
  for (const Instruction& instruction : program.instructions) {
    if (instruction.kind == InstructionKind::kAlloc) {
      never_freed += program.buffer(instruction.buffer).bytes;
    } else if (instruction.kind == InstructionKind::kFree) {
      never_freed -= program.buffer(instruction.buffer).bytes;
    }
  }

  // Every node 1 ms; 1 GB/s both ways.
  const FakeCostModel cost({}, 1e9, 1e9, /*default_seconds=*/1e-3);
  for (int engines : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << engines << " copy engines");
    const Simulator simulator(graph, cost, SimulatorOptions{.copy_engines = engines});
    const SimulationResult result = simulator.Run(program);
    ExpectConsistentTimings(simulator, program, result);
    EXPECT_GT(result.d2h_bytes, 0);
    EXPECT_EQ(result.d2h_bytes, result.h2d_bytes);  // every spilled tensor comes back once
    EXPECT_GT(result.recompute_flops, 0);
    EXPECT_NEAR(result.streams[kCompute].busy_s,
                1e-3 * static_cast<double>(graph.num_nodes()) + result.recompute_s, 1e-9);
    EXPECT_LE(result.peak_bytes, program.arena_bytes);
    // The curve ends with what is never freed: the persistent buffers and
    // the graph's outputs.
    ASSERT_FALSE(result.memory.empty());
    EXPECT_EQ(result.memory.back().bytes, never_freed);
    EXPECT_GT(result.memory.back().bytes, 0);

    // Copies and kernels that slow each other: the same invariants, the
    // same work, and a step no shorter; the clock agrees with the one pass
    // when the slowdown is negligible.
    const FakeCostModel contended({}, 1e9, 1e9, 1e-3,
                                  {.compute_slowdown = 0.5, .copy_slowdown = 0.8});
    const Simulator slowed(graph, contended, SimulatorOptions{.copy_engines = engines});
    const SimulationResult slow = slowed.Run(program);
    ExpectConsistentTimings(slowed, program, slow);
    EXPECT_GT(slow.step_time_s, result.step_time_s);
    EXPECT_EQ(slow.d2h_bytes, result.d2h_bytes);
    EXPECT_EQ(slow.recompute_flops, result.recompute_flops);
    EXPECT_EQ(slow.memory.back().bytes, never_freed);
    const FakeCostModel negligible({}, 1e9, 1e9, 1e-3, {.compute_slowdown = 1e-13});
    EXPECT_NEAR(Simulator(graph, negligible, SimulatorOptions{.copy_engines = engines})
                    .StepSeconds(program),
                result.step_time_s, 1e-9);
  }
}

}  // namespace
}  // namespace spillway::sim
