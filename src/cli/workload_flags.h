// The model options every workload command takes (`inspect` now; `plan`,
// `compare` and `train` later), bound to CLI11 flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"

namespace spillway::cli {

struct WorkloadFlags {
  std::string model;
  std::optional<int64_t> image;
  std::optional<int64_t> height;
  std::optional<int64_t> width;
  models::ModelOptions options;
};

// Adds --model, --batch, --image, --height, --width, --classes and the
// model-specific options to `command`.
void AddWorkloadFlags(CLI::App& command, WorkloadFlags& flags);

// --time-limit and --max-evaluations: how long the hybrid planner refines its
// plan (`plan`, `compare` and `train` take them).
struct PlannerLimitFlags {
  double time_limit_s = 1.5;
  int max_evaluations = 0;
};
void AddPlannerLimitFlags(CLI::App& command, PlannerLimitFlags& flags);

// Builds the forward graph the flags describe.
absl::StatusOr<ir::Graph> BuildWorkload(WorkloadFlags flags);

// "resnet50, batch 1, 8000x8000": the workload in words, for report headers.
std::string DescribeWorkload(const WorkloadFlags& flags);

}  // namespace spillway::cli
