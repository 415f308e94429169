// How long planning takes (Release build): the whole hybrid policy, from a
// training graph to a verified, simulated Program, on the workloads whose
// planning time docs/results.md reports; and what each stage of evaluating
// one candidate plan costs (rewrite, the two arena layouts, simulation), on
// the plan `swap` makes for ResNet-152. Run:
//   build/release/bench/planning_benchmark
#include <benchmark/benchmark.h>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "models/models.h"
#include "planner/planner.h"
#include "program/memory_layout.h"
#include "program/rewriter.h"
#include "support/check.h"

namespace spillway {
namespace {

struct Workload {
  const char* model;
  models::ModelOptions options;
  const char* hardware;
  int64_t budget_bytes = 0;  // 0: the profile's default budget
};

void PlanHybrid(benchmark::State& state, const Workload& workload) {
  absl::StatusOr<ir::Graph> forward = models::BuildModel(workload.model, workload.options);
  SPILLWAY_CHECK(forward.ok(), "the benchmark's model builds");
  absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
  SPILLWAY_CHECK(training.ok(), "the benchmark's model trains");
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile(workload.hardware);
  SPILLWAY_CHECK(profile.ok(), "the benchmark's profile is a preset");
  const analysis::RooflineCostModel cost_model(*profile);
  planner::PlannerOptions options;
  options.budget_bytes =
      workload.budget_bytes > 0 ? workload.budget_bytes : profile->default_budget_bytes();
  int64_t arena = 0;
  bool feasible = false;
  for (auto _ : state) {
    planner::PlanningContext context(training->graph, cost_model, *profile, options);
    absl::StatusOr<std::unique_ptr<planner::Policy>> policy = planner::MakePolicy("hybrid");
    absl::StatusOr<planner::PlanResult> result = planner::RunPolicy(**policy, context);
    SPILLWAY_CHECK(result.ok(), "hybrid plans the benchmark's workload");
    arena = result->best.arena_bytes();
    feasible = result->feasible;
    state.counters["evaluations"] = result->evaluations;
  }
  state.counters["arena_GiB"] = static_cast<double>(arena) / (1024.0 * 1024 * 1024);
  state.counters["feasible"] = feasible ? 1 : 0;
  state.counters["nodes"] = static_cast<double>(training->graph.num_nodes());
}

// The stages PlanningContext::Examine runs for every candidate, one at a time,
// on the Program of the plan `swap` makes for ResNet-152 at 7500x7500.
struct Candidate {
  analysis::HardwareProfile profile;
  ir::Graph graph;
  std::vector<ir::NodeId> schedule;
  program::Plan plan;
  program::Program program;  // rewritten, not laid out
  int64_t budget_bytes = 0;
};

const Candidate& SwapCandidate() {
  static const Candidate* const candidate = [] {
    models::ModelOptions options;
    options.height = options.width = 7500;
    absl::StatusOr<ir::Graph> forward = models::BuildModel("resnet152", options);
    SPILLWAY_CHECK(forward.ok(), "the benchmark's model builds");
    absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
    SPILLWAY_CHECK(training.ok(), "the benchmark's model trains");
    absl::StatusOr<analysis::HardwareProfile> profile =
        analysis::LoadHardwareProfile("v100-16g-nvlink2");
    SPILLWAY_CHECK(profile.ok(), "the benchmark's profile is a preset");
    const analysis::RooflineCostModel cost_model(*profile);
    planner::PlannerOptions planner_options;
    planner_options.budget_bytes = profile->default_budget_bytes();
    planner::PlanningContext context(training->graph, cost_model, *profile, planner_options);
    absl::StatusOr<std::unique_ptr<planner::Policy>> policy = planner::MakePolicy("swap");
    absl::StatusOr<planner::PlanResult> result = planner::RunPolicy(**policy, context);
    SPILLWAY_CHECK(result.ok(), "swap plans the benchmark's workload");
    auto* made = new Candidate{*profile,          training->graph,    context.schedule(),
                               result->best.plan, program::Program{}, planner_options.budget_bytes};
    // The Program points at its graph: rewrite the plan against the copy.
    absl::StatusOr<program::Program> program =
        program::Rewrite(made->graph, made->schedule, made->plan);
    SPILLWAY_CHECK(program.ok(), "the swap plan rewrites");
    made->program = *std::move(program);
    return made;
  }();
  return *candidate;
}

void Rewrite(benchmark::State& state) {
  const Candidate& candidate = SwapCandidate();
  for (auto _ : state) {
    absl::StatusOr<program::Program> program =
        program::Rewrite(candidate.graph, candidate.schedule, candidate.plan);
    benchmark::DoNotOptimize(program);
  }
  state.counters["instructions"] = static_cast<double>(candidate.program.instructions.size());
}
BENCHMARK(Rewrite)->Unit(benchmark::kMillisecond);

template <typename Heap>
void LayOut(benchmark::State& state) {
  const Candidate& candidate = SwapCandidate();
  int64_t arena = 0;
  for (auto _ : state) {
    Heap heap;
    arena = program::LayOut(candidate.program, heap).arena_bytes;
  }
  state.counters["buffers"] = static_cast<double>(candidate.program.buffers.size());
  state.counters["arena_GiB"] = static_cast<double>(arena) / (1024.0 * 1024 * 1024);
}
BENCHMARK_TEMPLATE(LayOut, program::BestFitHeap)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(LayOut, program::DecreasingSizeBestFitHeap)->Unit(benchmark::kMillisecond);

void ApplyLayout(benchmark::State& state) {
  const Candidate& candidate = SwapCandidate();
  program::DecreasingSizeBestFitHeap heap;
  const program::HeapLayout layout = program::LayOut(candidate.program, heap);
  for (auto _ : state) {
    state.PauseTiming();
    program::Program program = candidate.program;
    state.ResumeTiming();
    program::ApplyLayout(program, layout);
    benchmark::DoNotOptimize(program);
  }
}
BENCHMARK(ApplyLayout)->Unit(benchmark::kMillisecond);

void Simulate(benchmark::State& state) {
  const Candidate& candidate = SwapCandidate();
  const analysis::RooflineCostModel cost_model(candidate.profile);
  const sim::Simulator simulator(
      candidate.graph, cost_model,
      sim::SimulatorOptions{.copy_engines = candidate.profile.copy_engines});
  program::Program program = candidate.program;
  program::LayOutArena(program, candidate.budget_bytes);
  for (auto _ : state) {
    sim::SimulationResult result = simulator.Run(program);
    benchmark::DoNotOptimize(result);
  }
}
BENCHMARK(Simulate)->Unit(benchmark::kMillisecond);

models::ModelOptions Image(int64_t size) {
  models::ModelOptions options;
  options.height = options.width = size;
  return options;
}

models::ModelOptions Gpt2(int64_t layers) {
  models::ModelOptions options;
  options.n_layer = layers;
  return options;
}

BENCHMARK_CAPTURE(PlanHybrid, resnet152_7500_v100,
                  Workload{"resnet152", Image(7500), "v100-16g-nvlink2"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
// GPT-2 with 48 layers needs about 10 GiB: plan it into half of that.
BENCHMARK_CAPTURE(PlanHybrid, gpt2_48_layers_v100_5GiB,
                  Workload{"gpt2", Gpt2(48), "v100-16g-nvlink2", int64_t{5} << 30})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace spillway

BENCHMARK_MAIN();
