// What `spillway inspect` reports about a training graph: node counts, sizes,
// work, saved activations and the peak of the naive schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace spillway::analysis {

struct SavedTensorSummary {
  std::string name;
  std::string producer;  // node name
  std::string op;        // the producer's op
  ir::TensorType type;
  int64_t bytes = 0;
};

struct GraphSummary {
  int64_t forward_nodes = 0;
  int64_t backward_nodes = 0;
  int64_t update_nodes = 0;

  int64_t parameters = 0;  // trainable elements
  int64_t parameter_bytes = 0;
  int64_t buffer_bytes = 0;           // batch-norm running statistics
  int64_t optimizer_state_bytes = 0;  // momentum, Adam moments
  int64_t input_bytes = 0;            // images, tokens, labels

  int64_t forward_macs = 0;
  int64_t forward_flops = 0;
  int64_t backward_flops = 0;
  int64_t update_flops = 0;

  int64_t saved_tensors = 0;
  int64_t saved_bytes = 0;
  std::vector<SavedTensorSummary> largest_saved;  // largest first

  int64_t peak_bytes = 0;  // of the naive schedule, everything counted
  int peak_step = 0;
  int64_t steps = 0;
  std::string peak_node;
  std::string peak_op;
  ir::Phase peak_phase = ir::Phase::kForward;
};

// Summarizes a training graph (forward + backward + update nodes) in its
// deterministic topological order. `top_saved` bounds `largest_saved`.
GraphSummary Summarize(const ir::Graph& training, int top_saved = 10);

}  // namespace spillway::analysis
