// Runs a forward graph once, to check its numbers: an imported model's output
// against the framework it came from (`spillway forward`, docs/onnx.md).
//
// It goes through the training runtime (runtime.h), so there is one executor:
// the graph becomes a Program that keeps every value on the device (the
// `none` plan: each value allocated when its producer runs and freed after
// its last reader, on an arena laid out for that), with no budget beyond
// that arena; the runtime checks it against the machine's memory first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "ir/graph.h"

namespace spillway::runtime {

// The bytes of every graph input (inputs, parameters, buffers), by value
// name, in the IR's layout (NHWC for 4-D activations).
using ForwardInputs = std::map<std::string, std::span<const std::byte>, std::less<>>;

struct ForwardOptions {
  uint64_t step = 0;  // what dropout mixes into its seeds
};

struct ForwardResult {
  // The graph outputs' bytes in the IR's layout, in graph output order.
  std::vector<std::vector<std::byte>> outputs;
  int64_t peak_device_bytes = 0;  // most device bytes resident at once
  double seconds = 0;             // wall time of the step
};

// Errors: a graph with nodes that are not forward nodes, a graph input
// missing from `inputs` or with the wrong number of bytes, a name in `inputs`
// that is no graph input, and whatever the backend reports (naming the node).
absl::StatusOr<ForwardResult> RunForward(const ir::Graph& graph, backends::Backend& backend,
                                         const ForwardInputs& inputs,
                                         const ForwardOptions& options = {});

// A value's shape as frameworks (ONNX, PyTorch) write it: [N,C,H,W] for an
// NHWC value, its IR shape otherwise.
ir::Shape FrameworkShape(const ir::TensorType& type);

// A value's bytes between the IR's layout and the framework's order (NCHW for
// NHWC values; other values are copied unchanged). `bytes` must hold the
// whole value.
std::vector<std::byte> ToFrameworkOrder(const ir::TensorType& type,
                                        std::span<const std::byte> bytes);
std::vector<std::byte> FromFrameworkOrder(const ir::TensorType& type,
                                          std::span<const std::byte> bytes);

}  // namespace spillway::runtime
