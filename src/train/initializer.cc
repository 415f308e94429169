#include "train/initializer.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <span>

#include "backends/host_memory.h"
#include "fmt/format.h"
#include "support/checked_math.h"
#include "train/checkpoint.h"
#include "train/random.h"

namespace spillway::train {
namespace {

constexpr double kEmbeddingStd = 0.02;

// How a value starts: every element `constant`, or uniform in [-bound, bound).
struct Init {
  float constant = 0;
  double bound = 0;  // > 0: uniform
};

Init Constant(float value) { return {.constant = value, .bound = 0}; }
Init UniformWithBound(double bound) { return {.constant = 0, .bound = bound}; }
Init EmbeddingLike() { return UniformWithBound(kEmbeddingStd * std::sqrt(3.0)); }

// The role of `value` as input `index` of `node`, if it is one we know.
std::optional<Init> RoleAsInput(const ir::Node& node, size_t index, const ir::TensorType& type) {
  switch (node.op) {
    case ir::OpKind::kConv2d:
      if (index == 1) {
        const double fan_in = static_cast<double>(type.shape[1] * type.shape[2] * type.shape[3]);
        return UniformWithBound(std::sqrt(6.0 / fan_in));
      }
      if (index == 2) return Constant(0);
      break;
    case ir::OpKind::kLinear:
      if (index == 1) return UniformWithBound(1.0 / std::sqrt(static_cast<double>(type.shape[1])));
      if (index == 2) return Constant(0);
      break;
    case ir::OpKind::kBatchNorm:
      // gamma, beta, running_mean, running_var.
      if (index == 1 || index == 4) return Constant(1);
      if (index == 2 || index == 3) return Constant(0);
      break;
    case ir::OpKind::kLayerNorm:
      if (index == 1) return Constant(1);
      if (index == 2) return Constant(0);
      break;
    case ir::OpKind::kEmbedding:
      if (index == 0) return EmbeddingLike();
      break;
    default:
      break;
  }
  return std::nullopt;
}

Init InitFor(const ir::Graph& graph, ir::ValueId id, const std::vector<ir::NodeId>& users) {
  const ir::Value& value = graph.value(id);
  if (value.kind == ir::ValueKind::kOptimizerState) return Constant(0);
  for (ir::NodeId user : users) {
    const ir::Node& node = graph.node(user);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] != id) continue;
      if (std::optional<Init> init = RoleAsInput(node, i, value.type)) return *init;
    }
  }
  if (value.kind == ir::ValueKind::kParameter && value.type.rank() >= 2) return EmbeddingLike();
  return Constant(0);
}

}  // namespace

absl::Status CheckStateFitsHost(const ir::Graph& graph) {
  int64_t bytes = 0;
  for (ir::ValueId id : PersistentValues(graph)) {
    bytes = SaturatingAdd(bytes, graph.value(id).type.bytes());
  }
  for (ir::ValueId id : graph.InputsOfKind(ir::ValueKind::kInput)) {
    bytes = SaturatingAdd(bytes, graph.value(id).type.bytes());
  }
  return backends::CheckHostMemory(bytes, "the model's parameters, state and inputs");
}

absl::StatusOr<std::map<ir::ValueId, std::vector<std::byte>>> InitialState(
    const ir::Graph& graph, uint64_t seed, const NamedValues& given) {
  std::map<ir::ValueId, std::vector<std::byte>> state;
  for (const auto& [name, bytes] : given) {
    const std::optional<ir::ValueId> id = graph.FindValue(name);
    if (!id || (graph.value(*id).kind != ir::ValueKind::kParameter &&
                graph.value(*id).kind != ir::ValueKind::kBuffer)) {
      return absl::InvalidArgumentError(fmt::format(
          "an initial value is given for '{}', but graph '{}' has no parameter or buffer of "
          "that name",
          name, graph.name()));
    }
    const ir::Value& value = graph.value(*id);
    if (static_cast<int64_t>(bytes.size()) != value.type.bytes()) {
      return absl::InvalidArgumentError(
          fmt::format("the initial value of {} '{}' has {} bytes, but its type {} takes {}",
                      ir::ValueKindName(value.kind), name, bytes.size(),
                      ir::TypeToString(value.type), value.type.bytes()));
    }
    state[*id] = bytes;
  }
  const std::vector<std::vector<ir::NodeId>> users = graph.Users();
  for (ir::ValueId id : PersistentValues(graph)) {
    if (state.contains(id)) continue;
    const ir::Value& value = graph.value(id);
    std::vector<std::byte> bytes(static_cast<size_t>(value.type.bytes()));
    if (value.kind == ir::ValueKind::kOptimizerState && value.type.dtype == ir::DType::kI64 &&
        value.type.rank() == 0) {
      std::memcpy(bytes.data(), &kAdamInitialStep, sizeof(kAdamInitialStep));
      state[id] = std::move(bytes);
      continue;
    }
    if (value.type.dtype != ir::DType::kF32) {
      return absl::InvalidArgumentError(
          fmt::format("cannot initialize {} '{}' of type {}: the trainer initializes f32 values",
                      ir::ValueKindName(value.kind), value.name, ir::TypeToString(value.type)));
    }
    const Init init = InitFor(graph, id, users[static_cast<size_t>(id)]);
    const RandomStream stream(
        StreamKey(seed, {Fnv1a(std::as_bytes(std::span(value.name.data(), value.name.size())))}));
    const auto bound = static_cast<float>(init.bound);
    const int64_t count = value.type.bytes() / 4;
    for (int64_t i = 0; i < count; ++i) {
      const float element =
          init.bound > 0 ? stream.Uniform(static_cast<uint64_t>(i), -bound, bound) : init.constant;
      std::memcpy(bytes.data() + i * 4, &element, 4);
    }
    state[id] = std::move(bytes);
  }
  return state;
}

}  // namespace spillway::train
