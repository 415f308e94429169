#include "sim/simulator.h"

#include <algorithm>

#include "ir/op_registry.h"
#include "support/check.h"

namespace spillway::sim {

using program::Instruction;
using program::InstructionKind;
using program::Stream;

Simulator::Simulator(const ir::Graph& graph, const analysis::CostModel& cost_model,
                     SimulatorOptions options)
    : graph_(graph),
      cost_model_(cost_model),
      options_(options),
      node_seconds_(analysis::NodeTimes(cost_model, graph)) {
  node_flops_.reserve(static_cast<size_t>(graph.num_nodes()));
  for (const ir::Node& node : graph.nodes()) node_flops_.push_back(ir::NodeCost(graph, node).flops);
}

double Simulator::StepSeconds(const program::Program& program) const {
  SimulationResult result;
  Simulate(program, Detail::kStep, result);
  return result.step_time_s;
}

SimulationResult Simulator::Timeline(const program::Program& program) const {
  SimulationResult result;
  Simulate(program, Detail::kTimings, result);
  return result;
}

SimulationResult Simulator::Run(const program::Program& program) const {
  SimulationResult result;
  Simulate(program, Detail::kFull, result);
  return result;
}

void Simulator::Simulate(const program::Program& program, Detail detail,
                         SimulationResult& result) const {
  const bool full = detail == Detail::kFull;  // the memory curve and the stalls' causes too
  const bool timed = detail != Detail::kStep;
  SPILLWAY_CHECK(program.graph == &graph_, "a simulator times programs of its own graph");
  const std::vector<Instruction>& instructions = program.instructions;
  if (timed) result.timings.resize(instructions.size());
  std::vector<double> event_time(static_cast<size_t>(program.num_events), 0.0);
  // The kind of instruction that recorded each event, to say what a stall
  // waited for.
  std::vector<InstructionKind> event_kind(static_cast<size_t>(program.num_events),
                                          InstructionKind::kCompute);
  std::array<double, program::kNumStreams> stream_ready{};
  // With one copy engine both directions queue on it.
  double engine_ready = 0;
  const bool shared_engine = options_.copy_engines < 2;

  struct Change {
    double time_s;
    int64_t delta;
  };
  std::vector<Change> changes;
  if (full) changes.reserve(instructions.size());

  for (size_t i = 0; i < instructions.size(); ++i) {
    const Instruction& instruction = instructions[i];
    const size_t s = static_cast<size_t>(instruction.stream);
    double ready = stream_ready[s];
    program::EventId last_event = program::kNoEvent;  // the event `ready` waits for
    for (program::EventId event : instruction.waits) {
      if (event_time[static_cast<size_t>(event)] > ready) {
        ready = event_time[static_cast<size_t>(event)];
        last_event = event;
      }
    }
    const bool is_copy = instruction.kind == InstructionKind::kCopyToHost ||
                         instruction.kind == InstructionKind::kCopyToDevice;
    double start = ready;
    if (is_copy && shared_engine) start = std::max(start, engine_ready);

    double duration = 0;
    switch (instruction.kind) {
      case InstructionKind::kAlloc:
        if (full) changes.push_back({start, program.buffer(instruction.buffer).bytes});
        break;
      case InstructionKind::kFree:
        if (full) changes.push_back({start, -program.buffer(instruction.buffer).bytes});
        break;
      case InstructionKind::kCompute:
        duration = node_seconds(instruction.node);
        break;
      case InstructionKind::kRecompute:
        duration = node_seconds(instruction.node);
        result.recompute_s += duration;
        result.recompute_flops += node_flops_[static_cast<size_t>(instruction.node)];
        break;
      case InstructionKind::kCopyToHost: {
        const int64_t bytes = program.buffer(instruction.reads[0]).bytes;
        duration = cost_model_.CopySeconds(bytes, analysis::CopyDirection::kDeviceToHost);
        result.d2h_bytes += bytes;
        break;
      }
      case InstructionKind::kCopyToDevice: {
        const int64_t bytes = program.buffer(instruction.reads[0]).bytes;
        duration = cost_model_.CopySeconds(bytes, analysis::CopyDirection::kHostToDevice);
        result.h2d_bytes += bytes;
        break;
      }
    }
    const double end = start + duration;
    if (timed) result.timings[i] = {start, end};
    if (instruction.record != program::kNoEvent) {
      event_time[static_cast<size_t>(instruction.record)] = end;
      event_kind[static_cast<size_t>(instruction.record)] = instruction.kind;
    }
    // A free takes effect when its events allow but holds up nothing after it.
    if (instruction.kind == InstructionKind::kFree) continue;
    StreamStats& stats = result.streams[s];
    const double stall = start - stream_ready[s];
    stats.stall_s += stall;
    if (full && instruction.stream == Stream::kCompute && stall > 0) {
      SimulationResult::ComputeStalls& causes = result.compute_stalls;
      const InstructionKind cause = last_event == program::kNoEvent
                                        ? InstructionKind::kCompute
                                        : event_kind[static_cast<size_t>(last_event)];
      (cause == InstructionKind::kCopyToDevice ? causes.fetch_s
       : cause == InstructionKind::kFree       ? causes.memory_s
       : cause == InstructionKind::kCopyToHost ? causes.spill_s
                                               : causes.other_s) += stall;
    }
    stats.busy_s += duration;
    ++stats.instructions;
    stream_ready[s] = end;
    if (is_copy && shared_engine) engine_ready = end;
    result.step_time_s = std::max(result.step_time_s, end);
  }
  if (!full) return;

  // Frees before allocs at the same instant: a buffer handed over without a
  // gap does not count twice.
  std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
    return a.time_s < b.time_s || (a.time_s == b.time_s && a.delta < 0 && b.delta >= 0);
  });
  int64_t bytes = 0;
  result.memory.reserve(changes.size());
  for (const Change& change : changes) {
    bytes += change.delta;
    if (!result.memory.empty() && result.memory.back().time_s == change.time_s) {
      result.memory.back().bytes = bytes;
    } else {
      result.memory.push_back({change.time_s, bytes});
    }
    if (bytes > result.peak_bytes) {
      result.peak_bytes = bytes;
      result.peak_time_s = change.time_s;
    }
  }
}

}  // namespace spillway::sim
