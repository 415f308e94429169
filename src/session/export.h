// Trained weights out of a checkpoint: for evaluating a model with them
// (`spillway forward --checkpoint`), and back into the ONNX model they were
// trained from, in its layouts and under its names, everything else left as
// it was (onnx/exporter.h; `spillway export` and the Python module's export()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "session/workload.h"

namespace spillway::session {

// A checkpoint's value of every parameter and buffer of `graph`, by name. All
// of them must be there, with the graph's types, so a checkpoint of another
// model, or of this one imported with other shapes, is refused naming the
// first tensor that differs. `step`, if given, receives the checkpoint's.
absl::StatusOr<std::map<std::string, std::vector<std::byte>>> CheckpointValues(
    const ir::Graph& graph, const std::string& checkpoint_path, int64_t* step = nullptr);

struct ExportSummary {
  int64_t tensors = 0;   // parameters and buffers written
  int64_t elements = 0;  // their values, in all
  int64_t step = 0;      // the checkpoint's
};

// `workload` must be the ONNX workload the checkpoint was trained from (the
// same file, input shapes, batch, loss and frozen prefixes): a checkpoint of
// another model, or of this one imported with other shapes, is a one-line
// error naming the first tensor that differs. `out` is written atomically.
absl::StatusOr<ExportSummary> ExportToOnnx(const WorkloadSpec& workload,
                                           const std::string& checkpoint_path,
                                           const std::string& out);

}  // namespace spillway::session
