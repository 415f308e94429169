// How long planning takes (Release build): the whole hybrid policy, from a
// training graph to a verified, simulated Program, on the workloads whose
// planning time docs/results.md reports. Run:
//   build/release/bench/planning_benchmark
#include <benchmark/benchmark.h>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "models/models.h"
#include "planner/planner.h"
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
