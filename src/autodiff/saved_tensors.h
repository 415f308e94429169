// The saved tensors of a training graph: forward activations that a backward
// node reads. They are what the planner keeps, spills or recomputes.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace spillway::autodiff {

struct SavedTensor {
  ir::ValueId value = 0;
  int64_t bytes = 0;
  ir::NodeId producer = ir::kNoNode;         // a forward node
  std::vector<ir::NodeId> backward_readers;  // in node order
};

// Values produced by forward-phase nodes and read by at least one
// backward-phase node, in value order. Graph inputs (images, parameters) are
// resident for the whole step and are not listed.
std::vector<SavedTensor> SavedTensors(const ir::Graph& training);

}  // namespace spillway::autodiff
