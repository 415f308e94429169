// Plans a built-in model's training step through an installed Spillway:
// model zoo, autodiff, hardware presets, the roofline and two policies.
#include <cstdio>
#include <memory>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "models/models.h"
#include "planner/planner.h"

int main() {
  using namespace spillway;
  models::ModelOptions options;
  options.height = options.width = 64;
  options.batch = 2;
  absl::StatusOr<ir::Graph> forward = models::BuildModel("resnet18", options);
  if (!forward.ok()) return 1;
  absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(*forward, {});
  if (!training.ok()) return 1;
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("v100-16g-nvlink2");
  if (!profile.ok()) return 1;
  const analysis::RooflineCostModel cost_model(*profile);
  planner::PlannerOptions planner_options;
  planner_options.budget_bytes = profile->default_budget_bytes();
  planner::PlanningContext context(training->graph, cost_model, *profile, planner_options);
  for (const char* name : {"none", "hybrid"}) {
    absl::StatusOr<std::unique_ptr<planner::Policy>> policy = planner::MakePolicy(name);
    if (!policy.ok()) return 1;
    absl::StatusOr<planner::PlanResult> result = planner::RunPolicy(**policy, context);
    if (!result.ok() || !result->feasible) return 1;
    std::printf("%s: step %.6f s, arena %lld bytes\n", name, result->best.step_time_s(),
                static_cast<long long>(result->best.arena_bytes()));
  }
  return 0;
}
