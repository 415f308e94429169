// GraphBuilder: the convenient way to write a graph in C++. It keeps the first
// error and turns every later call into a no-op, so a model builder reads as a
// straight list of layers and checks for failure once, at the end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "ir/graph.h"

namespace spillway::ir {

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& graph) : graph_(graph) {}

  ValueId Input(std::string name, TensorType type);
  ValueId Parameter(std::string name, TensorType type);
  ValueId Buffer(std::string name, TensorType type);

  // Adds a node and returns its first output (kInvalidValue after an error).
  ValueId Op(OpKind op, std::vector<ValueId> inputs, AttrMap attrs, std::string name);
  // Adds a node and returns all its outputs (empty after an error).
  std::vector<ValueId> OpOutputs(OpKind op, std::vector<ValueId> inputs, AttrMap attrs,
                                 std::string name);

  void Output(ValueId value);

  const TensorType& type(ValueId value) const { return graph_.value(value).type; }
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  Graph& graph() { return graph_; }

 private:
  Graph& graph_;
  absl::Status status_;
};

}  // namespace spillway::ir
