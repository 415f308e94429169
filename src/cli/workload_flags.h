// The options every workload command takes (the model, ONNX file or graph
// file and their shapes), and the hybrid planner's options, bound to CLI11
// flags. What they describe is the session library's (session/workload.h).
#pragma once

#include "CLI/CLI.hpp"
#include "planner/planner.h"
#include "session/workload.h"

namespace spillway::cli {

// The CLI's flags fill the session library's description of a workload.
using WorkloadFlags = session::WorkloadSpec;

// Adds --model or --onnx (with --input-shape and --loss), --batch, --image,
// --height, --width, --classes and the model-specific options to `command`;
// with GraphFiles::kAccepted (inspect, plan, compare) also --graph's
// attribute names; otherwise --graph only to say where it goes.
enum class GraphFiles { kRefused, kAccepted };
void AddWorkloadFlags(CLI::App& command, WorkloadFlags& flags,
                      GraphFiles graph_files = GraphFiles::kRefused);

// --time-limit, --max-evaluations, --refine-passes and --plan-threads: how the
// hybrid planner refines its plan (`plan`, `compare` and `train` take them),
// straight into the planner's options.
void AddPlannerFlags(CLI::App& command, planner::PlannerOptions& options);

}  // namespace spillway::cli
