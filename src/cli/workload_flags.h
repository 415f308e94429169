// The model options every workload command takes (`inspect` now; `plan`,
// `compare` and `train` later), bound to CLI11 flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"
#include "models/models.h"
#include "nodelink/node_link.h"
#include "planner/planner.h"

namespace spillway::cli {

struct WorkloadFlags {
  std::string model;
  // An ONNX file instead of a built-in model, the shapes of its inputs
  // ("name=1x3x224x224", ONNX order) and the loss it gets ("cross-entropy").
  std::string onnx;
  std::vector<std::string> input_shapes;
  std::string loss;
  std::vector<std::string> frozen;  // initializer name prefixes that are not trained
  // A node-link graph with its own costs instead of a model: inspection,
  // planning and simulation only (inspect, plan, compare), with the names of
  // its attributes.
  std::string graph;
  nodelink::NodeLinkOptions graph_options;
  std::optional<int64_t> batch;  // the model's default (1), or the file's shapes
  std::optional<int64_t> image;
  std::optional<int64_t> height;
  std::optional<int64_t> width;
  models::ModelOptions options;
  // The model options given on the command line (never their defaults), so a
  // model that does not read one refuses it by name.
  std::vector<models::GivenOption> given;
};

// Adds --model or --onnx (with --input-shape and --loss), --batch, --image,
// --height, --width, --classes and the model-specific options to `command`;
// with GraphFiles::kAccepted (inspect, plan, compare) also --graph's
// attribute names; otherwise --graph only to say where it goes.
enum class GraphFiles { kRefused, kAccepted };
void AddWorkloadFlags(CLI::App& command, WorkloadFlags& flags,
                      GraphFiles graph_files = GraphFiles::kRefused);

// The graph of --graph, checked to come without model options (its sizes and
// costs are the file's). Errors are one line.
absl::StatusOr<nodelink::CostedGraph> LoadGraphFile(const WorkloadFlags& flags);

// --time-limit, --max-evaluations, --refine-passes and --plan-threads: how the
// hybrid planner refines its plan (`plan`, `compare` and `train` take them),
// straight into the planner's options.
void AddPlannerFlags(CLI::App& command, planner::PlannerOptions& options);

// A forward graph and, for an ONNX model, the weights in its file.
struct Workload {
  ir::Graph graph;
  // Parameter and buffer name -> value in the IR's layout; empty for a
  // built-in model, whose parameters are initialized from the seed.
  std::map<std::string, std::vector<std::byte>> initial_values;
  // The names of the graph's outputs as the user knows them: the ONNX file's
  // output names; empty for a built-in model (its value names are those).
  std::vector<std::string> output_names;
  // An ONNX model's initializers transposed to OHWI (convolution weights),
  // for writing trained values back (spillway export).
  std::set<std::string> ohwi_initializers;
};

// What the graph's outputs may be: training and planning need a scalar loss;
// `spillway forward` runs any graph.
enum class WorkloadOutputs { kScalarLoss, kAny };

// Builds the workload the flags describe: a built-in model, or an imported
// ONNX model with its weights.
absl::StatusOr<Workload> BuildWorkload(WorkloadFlags flags,
                                       WorkloadOutputs outputs = WorkloadOutputs::kScalarLoss);

// "resnet50, batch 1, 8000x8000": the workload in words, for report headers.
std::string DescribeWorkload(const WorkloadFlags& flags);

}  // namespace spillway::cli
