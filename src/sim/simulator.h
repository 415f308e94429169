// The simulator: runs a Program against a cost model, without executing
// anything, and says how long the step takes and how device memory evolves.
//
// Each stream runs its instructions in order; an instruction starts when its
// stream is free and its waited events are recorded. With one copy engine the
// two copy streams also share that engine, first come first served in program
// order. Allocs and frees take no time, and a free does not hold up its
// stream (program/program.h states the semantics).
//
// Where the cost model says copies and kernels share a resource
// (analysis::Contention, measured on the CPU by `spillway profile`), a kernel
// runs slower while a copy runs and a copy slower while a kernel runs, for
// exactly as long as they overlap; otherwise each takes its time alone.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "analysis/cost_model.h"
#include "program/program.h"

namespace spillway::sim {

struct SimulatorOptions {
  int copy_engines = 2;
};

using program::InstructionTiming;

struct StreamStats {
  double busy_s = 0;   // time spent running instructions
  double stall_s = 0;  // time between instructions spent waiting on events
  int64_t instructions = 0;
};

// Device bytes allocated from `time_s` on (a step function).
struct MemoryPoint {
  double time_s = 0;
  int64_t bytes = 0;
};

struct SimulationResult {
  double step_time_s = 0;
  std::array<StreamStats, program::kNumStreams> streams{};
  int64_t d2h_bytes = 0;
  int64_t h2d_bytes = 0;
  int64_t recompute_flops = 0;
  double recompute_s = 0;
  std::vector<InstructionTiming> timings;  // one per instruction
  std::vector<MemoryPoint> memory;         // every change, in time order
  int64_t peak_bytes = 0;                  // highest allocated total (at most the arena)
  double peak_time_s = 0;
  // What the compute stream's stalls waited for (Run only): each stall is
  // charged to the event that came last among those its instruction waited
  // on. They sum to streams[kCompute].stall_s.
  struct ComputeStalls {
    double fetch_s = 0;   // a fetch (copy back) not landed yet
    double memory_s = 0;  // arena bytes whose previous holder was not released yet
    double spill_s = 0;   // a copy out still reading a buffer about to be written
    double other_s = 0;   // anything else (an alloc or compute on another stream)
  } compute_stalls;
};

class Simulator {
 public:
  // Node times are computed once here; Run can then be called many times (a
  // policy tunes its plan with the simulator in the loop).
  Simulator(const ir::Graph& graph, const analysis::CostModel& cost_model,
            SimulatorOptions options = {});

  SimulationResult Run(const program::Program& program) const;
  // Run's step time alone, without recording timings or memory: for a planner
  // that only compares step times (it is the same number Run gives).
  double StepSeconds(const program::Program& program) const;
  // Run's step time and per-instruction timings, without the memory curve or
  // what the stalls waited for.
  SimulationResult Timeline(const program::Program& program) const;
  // Run's accounting (stream statistics, copied bytes, the memory curve,
  // what the compute stream's stalls waited for) of a step whose instruction
  // times were measured instead: one timing per instruction, each stream's
  // in program order. A measured step then reads like a simulated one, on a
  // trace or beside it.
  SimulationResult Account(const program::Program& program,
                           std::span<const InstructionTiming> timings) const;

  double node_seconds(ir::NodeId node) const { return node_seconds_[static_cast<size_t>(node)]; }
  double copy_seconds(int64_t bytes, analysis::CopyDirection direction) const {
    return cost_model_.CopySeconds(bytes, direction);
  }
  const analysis::Contention& contention() const { return contention_; }

 private:
  // How much of a SimulationResult to fill in besides the step time.
  enum class Detail { kStep, kTimings, kFull };
  class Timekeeper;
  // Times every instruction, recording what `detail` asks for into `result`.
  void Simulate(const program::Program& program, Detail detail, SimulationResult& result) const;
  // Each instruction takes its time alone: one pass in program order.
  void SimulateIndependent(const program::Program& program, Timekeeper& keeper) const;
  // Overlapping copies and kernels slow each other: time advances from one
  // finish to the next.
  void SimulateWithContention(const program::Program& program, Timekeeper& keeper) const;
  double SecondsAlone(const program::Program& program,
                      const program::Instruction& instruction) const;

  const ir::Graph& graph_;
  const analysis::CostModel& cost_model_;
  SimulatorOptions options_;
  analysis::Contention contention_;
  std::vector<double> node_seconds_;
  std::vector<int64_t> node_flops_;
};

}  // namespace spillway::sim
