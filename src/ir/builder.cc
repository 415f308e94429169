#include "ir/builder.h"

#include <algorithm>

namespace spillway::ir {

ValueId GraphBuilder::Input(std::string name, TensorType type) {
  return graph_.AddInput(std::move(name), std::move(type), ValueKind::kInput);
}

ValueId GraphBuilder::Parameter(std::string name, TensorType type) {
  return graph_.AddInput(std::move(name), std::move(type), ValueKind::kParameter);
}

ValueId GraphBuilder::Buffer(std::string name, TensorType type) {
  return graph_.AddInput(std::move(name), std::move(type), ValueKind::kBuffer);
}

std::vector<ValueId> GraphBuilder::OpOutputs(OpKind op, std::vector<ValueId> inputs, AttrMap attrs,
                                             std::string name) {
  if (!status_.ok()) return {};
  if (std::find(inputs.begin(), inputs.end(), kInvalidValue) != inputs.end()) return {};
  absl::StatusOr<NodeId> node =
      graph_.AddNode(op, std::move(inputs), std::move(attrs), std::move(name));
  if (!node.ok()) {
    status_ = node.status();
    return {};
  }
  return graph_.node(*node).outputs;
}

ValueId GraphBuilder::Op(OpKind op, std::vector<ValueId> inputs, AttrMap attrs, std::string name) {
  std::vector<ValueId> outputs =
      OpOutputs(op, std::move(inputs), std::move(attrs), std::move(name));
  return outputs.empty() ? kInvalidValue : outputs.front();
}

void GraphBuilder::Output(ValueId value) {
  if (status_.ok() && value != kInvalidValue) graph_.AddOutput(value);
}

}  // namespace spillway::ir
