#include "sim/simulator.h"

#include <algorithm>
#include <limits>

#include "ir/op_registry.h"
#include "support/check.h"

namespace spillway::sim {

using program::Instruction;
using program::InstructionKind;
using program::Stream;

namespace {

bool IsCopy(const Instruction& instruction) {
  return instruction.kind == InstructionKind::kCopyToHost ||
         instruction.kind == InstructionKind::kCopyToDevice;
}

bool IsKernel(const Instruction& instruction) {
  return instruction.kind == InstructionKind::kCompute ||
         instruction.kind == InstructionKind::kRecompute;
}

}  // namespace

// What both timing models share: once an instruction's start and end are
// known, its events, its stream's statistics, the bytes and FLOPs it
// accounts for, and the memory curve.
class Simulator::Timekeeper {
 public:
  Timekeeper(const Simulator& simulator, const program::Program& program, Detail detail,
             SimulationResult& result)
      : simulator_(simulator),
        program_(program),
        full_(detail == Detail::kFull),
        timed_(detail != Detail::kStep),
        result_(result),
        event_time_(static_cast<size_t>(program.num_events), 0.0),
        event_kind_(static_cast<size_t>(program.num_events), InstructionKind::kCompute) {
    if (timed_) result_.timings.resize(program.instructions.size());
    if (full_) changes_.reserve(program.instructions.size());
  }

  // When instruction i's stream is free and its waited events are recorded.
  double Ready(const Instruction& instruction) const {
    double ready = stream_ready_[static_cast<size_t>(instruction.stream)];
    for (program::EventId event : instruction.waits) {
      ready = std::max(ready, event_time_[static_cast<size_t>(event)]);
    }
    return ready;
  }

  // Instruction i ran from `start` to `end`.
  void Finish(size_t i, double start, double end) {
    const Instruction& instruction = program_.instructions[i];
    if (timed_) result_.timings[i] = {start, end};
    if (instruction.record != program::kNoEvent) {
      event_time_[static_cast<size_t>(instruction.record)] = end;
      event_kind_[static_cast<size_t>(instruction.record)] = instruction.kind;
    }
    switch (instruction.kind) {
      case InstructionKind::kAlloc:
        if (full_) changes_.push_back({start, program_.buffer(instruction.buffer).bytes});
        break;
      case InstructionKind::kFree:
        if (full_) changes_.push_back({start, -program_.buffer(instruction.buffer).bytes});
        // A free takes effect when its events allow but holds up nothing
        // after it.
        return;
      case InstructionKind::kCompute:
        break;
      case InstructionKind::kRecompute:
        result_.recompute_s += end - start;
        result_.recompute_flops += simulator_.node_flops_[static_cast<size_t>(instruction.node)];
        break;
      case InstructionKind::kCopyToHost:
        result_.d2h_bytes += program_.buffer(instruction.reads[0]).bytes;
        break;
      case InstructionKind::kCopyToDevice:
        result_.h2d_bytes += program_.buffer(instruction.reads[0]).bytes;
        break;
    }
    const size_t s = static_cast<size_t>(instruction.stream);
    StreamStats& stats = result_.streams[s];
    const double stall = start - stream_ready_[s];
    stats.stall_s += stall;
    if (full_ && instruction.stream == Stream::kCompute && stall > 0)
      ChargeStall(instruction, stall);
    stats.busy_s += end - start;
    ++stats.instructions;
    stream_ready_[s] = end;
    result_.step_time_s = std::max(result_.step_time_s, end);
  }

  // The memory curve from the allocs and frees recorded (Run only).
  void FinishMemoryCurve() {
    if (!full_) return;
    // Frees before allocs at the same instant: a buffer handed over without
    // a gap does not count twice.
    std::stable_sort(changes_.begin(), changes_.end(), [](const Change& a, const Change& b) {
      return a.time_s < b.time_s || (a.time_s == b.time_s && a.delta < 0 && b.delta >= 0);
    });
    int64_t bytes = 0;
    result_.memory.reserve(changes_.size());
    for (const Change& change : changes_) {
      bytes += change.delta;
      if (!result_.memory.empty() && result_.memory.back().time_s == change.time_s) {
        result_.memory.back().bytes = bytes;
      } else {
        result_.memory.push_back({change.time_s, bytes});
      }
      if (bytes > result_.peak_bytes) {
        result_.peak_bytes = bytes;
        result_.peak_time_s = change.time_s;
      }
    }
  }

 private:
  struct Change {
    double time_s;
    int64_t delta;
  };

  // Charges a compute-stream stall to the event, among those its instruction
  // waited on, that came last.
  void ChargeStall(const Instruction& instruction, double stall) {
    double ready = stream_ready_[static_cast<size_t>(Stream::kCompute)];
    InstructionKind cause = InstructionKind::kCompute;
    for (program::EventId event : instruction.waits) {
      if (event_time_[static_cast<size_t>(event)] > ready) {
        ready = event_time_[static_cast<size_t>(event)];
        cause = event_kind_[static_cast<size_t>(event)];
      }
    }
    SimulationResult::ComputeStalls& causes = result_.compute_stalls;
    (cause == InstructionKind::kCopyToDevice ? causes.fetch_s
     : cause == InstructionKind::kFree       ? causes.memory_s
     : cause == InstructionKind::kCopyToHost ? causes.spill_s
                                             : causes.other_s) += stall;
  }

  const Simulator& simulator_;
  const program::Program& program_;
  const bool full_;   // the memory curve and the stalls' causes too
  const bool timed_;  // per-instruction timings
  SimulationResult& result_;
  std::vector<double> event_time_;
  // The kind of instruction that recorded each event, to say what a stall
  // waited for.
  std::vector<InstructionKind> event_kind_;
  // When each stream's last instruction (other than a free) ended.
  std::array<double, program::kNumStreams> stream_ready_{};
  std::vector<Change> changes_;
};

Simulator::Simulator(const ir::Graph& graph, const analysis::CostModel& cost_model,
                     SimulatorOptions options)
    : graph_(graph),
      cost_model_(cost_model),
      options_(options),
      contention_(cost_model.contention()),
      node_seconds_(analysis::NodeTimes(cost_model, graph)) {
  SPILLWAY_CHECK(contention_.compute_slowdown >= 0 && contention_.copy_slowdown >= 0,
                 "slowdowns are >= 0");
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

SimulationResult Simulator::Account(const program::Program& program,
                                    std::span<const InstructionTiming> timings) const {
  SPILLWAY_CHECK(program.graph == &graph_, "a simulator accounts programs of its own graph");
  SPILLWAY_CHECK(timings.size() == program.instructions.size(), "one timing per instruction");
  SimulationResult result;
  Timekeeper keeper(*this, program, Detail::kFull, result);
  for (size_t i = 0; i < timings.size(); ++i)
    keeper.Finish(i, timings[i].start_s, timings[i].end_s);
  keeper.FinishMemoryCurve();
  return result;
}

double Simulator::SecondsAlone(const program::Program& program,
                               const Instruction& instruction) const {
  switch (instruction.kind) {
    case InstructionKind::kAlloc:
    case InstructionKind::kFree:
      return 0;
    case InstructionKind::kCompute:
    case InstructionKind::kRecompute:
      return node_seconds(instruction.node);
    case InstructionKind::kCopyToHost:
      return cost_model_.CopySeconds(program.buffer(instruction.reads[0]).bytes,
                                     analysis::CopyDirection::kDeviceToHost);
    case InstructionKind::kCopyToDevice:
      return cost_model_.CopySeconds(program.buffer(instruction.reads[0]).bytes,
                                     analysis::CopyDirection::kHostToDevice);
  }
  return 0;
}

void Simulator::Simulate(const program::Program& program, Detail detail,
                         SimulationResult& result) const {
  SPILLWAY_CHECK(program.graph == &graph_, "a simulator times programs of its own graph");
  Timekeeper keeper(*this, program, detail, result);
  if (contention_.any()) {
    SimulateWithContention(program, keeper);
  } else {
    SimulateIndependent(program, keeper);
  }
  keeper.FinishMemoryCurve();
}

// Without contention every instruction takes its time alone, so one pass in
// program order times it: everything it waits for comes before it.
void Simulator::SimulateIndependent(const program::Program& program, Timekeeper& keeper) const {
  // With one copy engine both directions queue on it.
  double engine_ready = 0;
  const bool shared_engine = options_.copy_engines < 2;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    const bool queues_on_engine = shared_engine && IsCopy(instruction);
    const double start = std::max(keeper.Ready(instruction), queues_on_engine ? engine_ready : 0.0);
    const double end = start + SecondsAlone(program, instruction);
    keeper.Finish(i, start, end);
    if (queues_on_engine) engine_ready = end;
  }
}

// With contention an instruction's duration depends on what overlaps it,
// including instructions later in program order, so time advances from one
// finish to the next: at each instant every instruction that can start does,
// and the running ones progress at the rates contention leaves them until
// the next one finishes.
void Simulator::SimulateWithContention(const program::Program& program, Timekeeper& keeper) const {
  const std::vector<Instruction>& instructions = program.instructions;
  std::array<std::vector<size_t>, program::kNumStreams> queue;
  for (size_t i = 0; i < instructions.size(); ++i) {
    queue[static_cast<size_t>(instructions[i].stream)].push_back(i);
  }
  std::array<size_t, program::kNumStreams> next{};  // each queue's first not started
  // With one copy engine both directions queue on it, in program order.
  const bool shared_engine = options_.copy_engines < 2;
  std::vector<size_t> copies;
  if (shared_engine) {
    for (size_t i = 0; i < instructions.size(); ++i) {
      if (IsCopy(instructions[i])) copies.push_back(i);
    }
  }
  size_t next_copy = 0;
  bool engine_busy = false;

  struct Running {
    bool active = false;
    size_t instruction = 0;
    double start = 0;
    double remaining_s = 0;  // of its time alone
  };
  std::array<Running, program::kNumStreams> running{};
  std::vector<char> recorded(static_cast<size_t>(program.num_events), 0);
  const auto can_start = [&](const Instruction& instruction) {
    return std::all_of(
        instruction.waits.begin(), instruction.waits.end(),
        [&](program::EventId event) { return recorded[static_cast<size_t>(event)]; });
  };
  size_t finished = 0;
  const auto finish = [&](size_t i, double start, double end) {
    keeper.Finish(i, start, end);
    if (instructions[i].record != program::kNoEvent) {
      recorded[static_cast<size_t>(instructions[i].record)] = 1;
    }
    ++finished;
  };
  // Frees reached on their streams, waiting for their events.
  std::vector<size_t> pending_frees;

  double now = 0;
  while (finished < instructions.size()) {
    // Start everything that can start now; what takes no time finishes at
    // once and may let more start.
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t s = 0; s < queue.size(); ++s) {
        while (!running[s].active && next[s] < queue[s].size()) {
          const size_t i = queue[s][next[s]];
          const Instruction& instruction = instructions[i];
          if (instruction.kind == InstructionKind::kFree) {
            pending_frees.push_back(i);
            ++next[s];
            progress = true;
            continue;
          }
          if (!can_start(instruction)) break;
          const bool queues_on_engine = shared_engine && IsCopy(instruction);
          if (queues_on_engine && (engine_busy || copies[next_copy] != i)) break;
          ++next[s];
          progress = true;
          if (queues_on_engine) ++next_copy;
          const double alone = SecondsAlone(program, instruction);
          if (alone == 0) {
            finish(i, now, now);
            continue;
          }
          running[s] = {.active = true, .instruction = i, .start = now, .remaining_s = alone};
          if (queues_on_engine) engine_busy = true;
        }
      }
      std::erase_if(pending_frees, [&](size_t i) {
        if (!can_start(instructions[i])) return false;
        finish(i, now, now);
        progress = true;
        return true;
      });
    }
    if (finished == instructions.size()) break;

    // Advance to the next finish at the current rates.
    bool copying = false;
    bool computing = false;
    for (const Running& r : running) {
      if (!r.active) continue;
      copying |= IsCopy(instructions[r.instruction]);
      computing |= IsKernel(instructions[r.instruction]);
    }
    std::array<double, program::kNumStreams> rate{};
    double step = std::numeric_limits<double>::infinity();
    for (size_t s = 0; s < running.size(); ++s) {
      if (!running[s].active) continue;
      const Instruction& instruction = instructions[running[s].instruction];
      rate[s] = IsKernel(instruction) && copying   ? 1 / (1 + contention_.compute_slowdown)
                : IsCopy(instruction) && computing ? 1 / (1 + contention_.copy_slowdown)
                                                   : 1.0;
      step = std::min(step, running[s].remaining_s / rate[s]);
    }
    SPILLWAY_CHECK(step < std::numeric_limits<double>::infinity(),
                   "the program waits on an event that no instruction before it records");
    now += step;
    for (size_t s = 0; s < running.size(); ++s) {
      Running& r = running[s];
      if (!r.active) continue;
      if (r.remaining_s / rate[s] <= step) {
        r.active = false;
        if (shared_engine && IsCopy(instructions[r.instruction])) engine_busy = false;
        finish(r.instruction, r.start, now);
      } else {
        r.remaining_s -= rate[s] * step;
      }
    }
  }
}

}  // namespace spillway::sim
