// The saved tensors of a training graph: forward values that a backward node
// reads. They are what the planner keeps, spills or recomputes.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace spillway::autodiff {

struct SavedTensor {
  ir::ValueId value = 0;
  int64_t bytes = 0;
  ir::NodeId producer = ir::kNoNode;         // a forward node; kNoNode for a graph input
  std::vector<ir::NodeId> backward_readers;  // in node order
};

// Activations: values produced by forward-phase nodes and read by at least one
// backward-phase node, in value order. These are the planner's candidates.
std::vector<SavedTensor> SavedTensors(const ir::Graph& training);

// Graph inputs that backward nodes read (images and labels, and parameters and
// buffers, whose kind the graph says), in value order. They are resident for
// the whole step, so the planner has nothing to decide about them; they are
// listed apart so that reports and tests can see every saved edge.
std::vector<SavedTensor> SavedGraphInputs(const ir::Graph& training);

}  // namespace spillway::autodiff
