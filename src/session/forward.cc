#include "session/forward.h"

#include <cstring>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "runtime/forward.h"
#include "session/export.h"
#include "support/status_macros.h"
#include "train/initializer.h"
#include "train/random.h"

namespace spillway::session {

std::optional<NpyDType> NpyTypeOf(ir::DType dtype) {
  if (dtype == ir::DType::kF32) return NpyDType::kF32;
  if (dtype == ir::DType::kI64) return NpyDType::kI64;
  return std::nullopt;
}

namespace {

absl::StatusOr<InputValue> ReadInput(const ir::Value& value, const std::string& path) {
  ASSIGN_OR_RETURN(const NpyArray array, ReadNpyFile(path));
  const ir::Shape expected = runtime::FrameworkShape(value.type);
  const std::optional<NpyDType> dtype = NpyTypeOf(value.type.dtype);
  if (!dtype || array.dtype != *dtype || array.shape != expected) {
    return absl::InvalidArgumentError(
        fmt::format("input '{}' is {} {} (ONNX order); {} holds {} {}", value.name,
                    ir::ShapeToString(expected), ir::DTypeName(value.type.dtype), path,
                    ir::ShapeToString(array.shape), NpyDTypeName(array.dtype)));
  }
  return InputValue{runtime::FromFrameworkOrder(value.type, array.data), path};
}

// The exclusive upper bound of an integer input: the classes of the loss that
// reads it as labels, or the rows of the embedding that reads it as indices.
std::optional<int64_t> IntegerLimit(const ir::Graph& graph, ir::ValueId value) {
  for (const ir::Node& node : graph.nodes()) {
    if (node.op == ir::OpKind::kCrossEntropyLoss && node.inputs[1] == value) {
      return graph.value(node.inputs[0]).type.shape.back();
    }
    if (node.op == ir::OpKind::kEmbedding && node.inputs[1] == value) {
      return graph.value(node.inputs[0]).type.shape.front();
    }
  }
  return std::nullopt;
}

// Uniform values from the seed: floats in [-1, 1), integers in their range.
absl::StatusOr<InputValue> SeededInput(const ir::Graph& graph, ir::ValueId id, int64_t seed) {
  const ir::Value& value = graph.value(id);
  const train::RandomStream random(
      train::StreamKey(static_cast<uint64_t>(seed), {static_cast<uint64_t>(id)}));
  const size_t count = static_cast<size_t>(*ir::NumElements(value.type.shape));
  InputValue input{std::vector<std::byte>(static_cast<size_t>(value.type.bytes())),
                   fmt::format("seed {}", seed)};
  if (value.type.dtype == ir::DType::kF32) {
    std::vector<float> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = random.Uniform(i, -1.0f, 1.0f);
    if (count > 0) std::memcpy(input.bytes.data(), values.data(), input.bytes.size());
    return input;
  }
  const std::optional<int64_t> limit = IntegerLimit(graph, id);
  if (value.type.dtype != ir::DType::kI64 || !limit || *limit <= 0) {
    return absl::InvalidArgumentError(fmt::format(
        "input '{}' ({}) cannot be drawn from the seed; give it with --input {}=FILE.npy",
        value.name, ir::TypeToString(value.type), value.name));
  }
  std::vector<int64_t> values(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = static_cast<int64_t>(random.Below(i, static_cast<uint64_t>(*limit)));
  }
  if (count > 0) std::memcpy(input.bytes.data(), values.data(), input.bytes.size());
  return input;
}

}  // namespace

absl::StatusOr<std::map<std::string, InputValue>> GatherInputs(
    const ir::Graph& graph, const std::vector<std::string>& given, int64_t seed) {
  std::map<std::string, InputValue> inputs;
  std::vector<std::string> names;
  for (ir::ValueId id : graph.InputsOfKind(ir::ValueKind::kInput)) {
    names.push_back(graph.value(id).name);
  }
  for (const std::string& text : given) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
      return absl::InvalidArgumentError(fmt::format("--input '{}': expected NAME=FILE.npy", text));
    }
    const std::string name = text.substr(0, eq);
    const std::optional<ir::ValueId> id = graph.FindValue(name);
    if (!id || graph.value(*id).kind != ir::ValueKind::kInput) {
      return absl::InvalidArgumentError(
          fmt::format("--input {}: the model has no input '{}'; its inputs are {}", text, name,
                      fmt::join(names, ", ")));
    }
    if (inputs.contains(name)) {
      return absl::InvalidArgumentError(fmt::format("--input {} is given twice", name));
    }
    ASSIGN_OR_RETURN(inputs[name], ReadInput(graph.value(*id), text.substr(eq + 1)));
  }
  for (ir::ValueId id : graph.InputsOfKind(ir::ValueKind::kInput)) {
    const std::string& name = graph.value(id).name;
    if (inputs.contains(name)) continue;
    ASSIGN_OR_RETURN(inputs[name], SeededInput(graph, id, seed));
  }
  return inputs;
}

absl::StatusOr<std::map<std::string, std::vector<std::byte>>> ModelValues(
    Workload& workload, const WorkloadSpec& spec, const std::string& checkpoint) {
  if (!checkpoint.empty()) return CheckpointValues(workload.graph, checkpoint);
  if (!spec.onnx.empty()) return std::move(workload.initial_values);
  ASSIGN_OR_RETURN(const auto state,
                   train::InitialState(workload.graph, static_cast<uint64_t>(spec.options.seed)));
  std::map<std::string, std::vector<std::byte>> values;
  for (const auto& [id, bytes] : state) values[workload.graph.value(id).name] = bytes;
  return values;
}

}  // namespace spillway::session
