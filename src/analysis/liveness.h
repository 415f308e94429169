// Liveness of every buffer over a schedule (an order of the graph's nodes), and
// the device-memory curve of the naive schedule, which keeps each value from
// the step that produces it to the step of its last use.
//
// What counts: graph inputs of every kind (data, labels, parameters, buffers,
// optimizer state) are resident for the whole step; every value a node
// produces is allocated when its node runs and freed after its last reader
// (graph outputs live to the end). An op's inputs and outputs coexist while it
// runs. Outputs the registry declares in place (optimizer updates, running
// statistics) reuse their input's buffer and cost nothing extra.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/graph.h"

namespace spillway::analysis {

// A device buffer: one value, or a value and the in-place outputs that reuse it.
struct BufferLiveness {
  ir::ValueId value = 0;  // the value that owns the buffer
  int64_t bytes = 0;
  bool persistent = false;  // a graph input: resident for the whole step
  int first_step = 0;       // step of the producer (0 for persistent buffers)
  int last_step = 0;        // last step that reads or writes it
};

struct MemoryCurve {
  std::vector<int64_t> bytes_at_step;  // resident bytes while each step runs
  int64_t persistent_bytes = 0;        // graph inputs: parameters, state, data
  int64_t peak_bytes = 0;
  int peak_step = 0;
  ir::NodeId peak_node = ir::kNoNode;
};

class Liveness {
 public:
  // `order` must be a topological order of `graph` containing every node.
  static Liveness Analyze(const ir::Graph& graph, std::span<const ir::NodeId> order);

  const std::vector<BufferLiveness>& buffers() const { return buffers_; }
  // The buffer a value lives in (an in-place output maps to its input's buffer).
  int buffer_of(ir::ValueId value) const { return buffer_of_value_[static_cast<size_t>(value)]; }
  // Step of a node in the schedule.
  int step_of(ir::NodeId node) const { return step_of_node_[static_cast<size_t>(node)]; }
  // First step that reads a value (-1 if nothing reads it) and last such step.
  int first_use(ir::ValueId value) const { return first_use_[static_cast<size_t>(value)]; }
  int last_use(ir::ValueId value) const { return last_use_[static_cast<size_t>(value)]; }

  MemoryCurve NaiveMemoryCurve() const;

 private:
  std::vector<ir::NodeId> order_;
  std::vector<BufferLiveness> buffers_;
  std::vector<int> buffer_of_value_;
  std::vector<int> step_of_node_;
  std::vector<int> first_use_;
  std::vector<int> last_use_;
};

}  // namespace spillway::analysis
