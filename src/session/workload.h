// A workload: what is trained or planned. A built-in model with its options,
// an ONNX model with its input shapes, loss and frozen prefixes, or a
// node-link graph with its own costs (planning only). The command line binds
// its flags into a WorkloadSpec (cli/workload_flags.h); the Python module its
// keywords. Errors are one line and name options by their command-line flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"
#include "models/models.h"
#include "nodelink/node_link.h"

namespace spillway::session {

struct WorkloadSpec {
  std::string model;
  // An ONNX file instead of a built-in model, the shapes of its inputs
  // ("name=1x3x224x224", ONNX order) and the loss it gets ("cross-entropy").
  std::string onnx;
  std::vector<std::string> input_shapes;
  std::string loss;
  std::vector<std::string> frozen;  // initializer name prefixes that are not trained
  // A node-link graph with its own costs instead of a model: inspection,
  // planning and simulation only, with the names of its attributes.
  std::string graph;
  nodelink::NodeLinkOptions graph_options;
  std::optional<int64_t> batch;  // the model's default (1), or the file's shapes
  std::optional<int64_t> image;
  std::optional<int64_t> height;
  std::optional<int64_t> width;
  models::ModelOptions options;
  // The model options given explicitly (never their defaults), so a model
  // that does not read one refuses it by name.
  std::vector<models::GivenOption> given;
};

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

// Builds the workload the spec describes: a built-in model, or an imported
// ONNX model with its weights. A graph file is refused: it is planned, never
// run (LoadGraphFile).
absl::StatusOr<Workload> BuildWorkload(WorkloadSpec spec,
                                       WorkloadOutputs outputs = WorkloadOutputs::kScalarLoss);

// The graph of spec.graph, checked to come without model options (its sizes
// and costs are the file's).
absl::StatusOr<nodelink::CostedGraph> LoadGraphFile(const WorkloadSpec& spec);

// "resnet50, batch 1, 8000x8000": the workload in words, for report headers.
std::string DescribeWorkload(const WorkloadSpec& spec);

}  // namespace spillway::session
