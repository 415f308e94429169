#include "autodiff/saved_tensors.h"

namespace spillway::autodiff {
namespace {

// The value as a saved tensor, or no readers when no backward node reads it.
SavedTensor ReadByBackward(const ir::Graph& training, const ir::Value& value,
                           const std::vector<ir::NodeId>& users) {
  SavedTensor tensor;
  tensor.value = value.id;
  tensor.bytes = value.type.bytes();
  tensor.producer = value.producer;
  for (ir::NodeId reader : users) {
    if (training.node(reader).phase == ir::Phase::kBackward) {
      tensor.backward_readers.push_back(reader);
    }
  }
  return tensor;
}

}  // namespace

std::vector<SavedTensor> SavedTensors(const ir::Graph& training) {
  const std::vector<std::vector<ir::NodeId>> users = training.Users();
  std::vector<SavedTensor> saved;
  for (const ir::Value& value : training.values()) {
    if (value.producer == ir::kNoNode) continue;
    if (training.node(value.producer).phase != ir::Phase::kForward) continue;
    SavedTensor tensor = ReadByBackward(training, value, users[static_cast<size_t>(value.id)]);
    if (!tensor.backward_readers.empty()) saved.push_back(std::move(tensor));
  }
  return saved;
}

std::vector<SavedTensor> SavedGraphInputs(const ir::Graph& training) {
  const std::vector<std::vector<ir::NodeId>> users = training.Users();
  std::vector<SavedTensor> saved;
  for (const ir::Value& value : training.values()) {
    if (value.producer != ir::kNoNode) continue;
    SavedTensor tensor = ReadByBackward(training, value, users[static_cast<size_t>(value.id)]);
    if (!tensor.backward_readers.empty()) saved.push_back(std::move(tensor));
  }
  return saved;
}

}  // namespace spillway::autodiff
