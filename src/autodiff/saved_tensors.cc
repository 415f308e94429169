#include "autodiff/saved_tensors.h"

namespace spillway::autodiff {

std::vector<SavedTensor> SavedTensors(const ir::Graph& training) {
  const std::vector<std::vector<ir::NodeId>> users = training.Users();
  std::vector<SavedTensor> saved;
  for (const ir::Value& value : training.values()) {
    if (value.producer == ir::kNoNode) continue;
    if (training.node(value.producer).phase != ir::Phase::kForward) continue;
    SavedTensor tensor;
    for (ir::NodeId reader : users[static_cast<size_t>(value.id)]) {
      if (training.node(reader).phase == ir::Phase::kBackward) {
        tensor.backward_readers.push_back(reader);
      }
    }
    if (tensor.backward_readers.empty()) continue;
    tensor.value = value.id;
    tensor.bytes = value.type.bytes();
    tensor.producer = value.producer;
    saved.push_back(std::move(tensor));
  }
  return saved;
}

}  // namespace spillway::autodiff
