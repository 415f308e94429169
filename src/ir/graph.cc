#include "ir/graph.h"

#include <array>
#include <functional>
#include <limits>
#include <queue>
#include <utility>

#include "fmt/format.h"
#include "ir/op_registry.h"
#include "support/check.h"
#include "support/checked_math.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::ir {
namespace {

constexpr std::array<std::pair<Phase, std::string_view>, 3> kPhaseNames = {
    {{Phase::kForward, "forward"}, {Phase::kBackward, "backward"}, {Phase::kUpdate, "update"}}};

constexpr std::array<std::pair<ValueKind, std::string_view>, 5> kValueKindNames = {{
    {ValueKind::kInput, "input"},
    {ValueKind::kParameter, "param"},
    {ValueKind::kBuffer, "buffer"},
    {ValueKind::kOptimizerState, "state"},
    {ValueKind::kIntermediate, "intermediate"},
}};

template <typename Enum, size_t N>
std::string_view NameOf(const std::array<std::pair<Enum, std::string_view>, N>& table, Enum e) {
  for (const auto& [value, name] : table) {
    if (value == e) return name;
  }
  SPILLWAY_CHECK(false, "enum value without a name");
}

template <typename Enum, size_t N>
std::optional<Enum> Parse(const std::array<std::pair<Enum, std::string_view>, N>& table,
                          std::string_view text) {
  for (const auto& [value, name] : table) {
    if (name == text) return value;
  }
  return std::nullopt;
}

}  // namespace

std::string_view PhaseName(Phase phase) { return NameOf(kPhaseNames, phase); }
std::optional<Phase> ParsePhase(std::string_view name) { return Parse(kPhaseNames, name); }
std::string_view ValueKindName(ValueKind kind) { return NameOf(kValueKindNames, kind); }
std::optional<ValueKind> ParseValueKind(std::string_view name) {
  return Parse(kValueKindNames, name);
}

std::string Graph::UniqueValueName(std::string name) {
  if (name.empty()) name = "v";
  if (!value_by_name_.contains(name)) return name;
  for (int suffix = 1;; ++suffix) {
    std::string candidate = fmt::format("{}_{}", name, suffix);
    if (!value_by_name_.contains(candidate)) return candidate;
  }
}

std::string Graph::UniqueNodeName(std::string name) {
  if (name.empty()) name = "n";
  if (!node_by_name_.contains(name)) return name;
  for (int suffix = 1;; ++suffix) {
    std::string candidate = fmt::format("{}_{}", name, suffix);
    if (!node_by_name_.contains(candidate)) return candidate;
  }
}

ValueId Graph::NewValue(std::string name, TensorType type, ValueKind kind, NodeId producer,
                        int output_index) {
  Value value;
  value.id = static_cast<ValueId>(values_.size());
  value.name = UniqueValueName(std::move(name));
  value.type = std::move(type);
  value.kind = kind;
  value.producer = producer;
  value.output_index = output_index;
  total_bytes_ =
      SaturatingAdd(total_bytes_, value.type.Bytes().value_or(std::numeric_limits<int64_t>::max()));
  value_by_name_.emplace(value.name, value.id);
  values_.push_back(std::move(value));
  return values_.back().id;
}

ValueId Graph::AddInput(std::string name, TensorType type, ValueKind kind) {
  SPILLWAY_CHECK(kind != ValueKind::kIntermediate, "graph inputs cannot be intermediates");
  ValueId id = NewValue(std::move(name), std::move(type), kind, kNoNode, 0);
  inputs_.push_back(id);
  return id;
}

absl::StatusOr<NodeId> Graph::AddNode(OpKind op, std::vector<ValueId> inputs, AttrMap attrs,
                                      std::string name, Phase phase) {
  std::vector<TensorType> input_types;
  input_types.reserve(inputs.size());
  for (ValueId input : inputs) {
    if (input < 0 || input >= num_values()) {
      return absl::InvalidArgumentError(
          fmt::format("node '{}' ({}): input value {} does not exist", name, OpName(op), input));
    }
    input_types.push_back(value(input).type);
  }
  absl::StatusOr<std::vector<TensorType>> output_types = InferOutputTypes(op, attrs, input_types);
  if (!output_types.ok()) {
    return Annotate(output_types.status(), fmt::format("node '{}' ({})", name, OpName(op)));
  }
  const OpDef& def = GetOpDef(op);
  std::vector<std::pair<std::string, TensorType>> outputs;
  for (size_t i = 0; i < output_types->size(); ++i) {
    std::string output_name = name;
    if (output_types->size() > 1 && i > 0) {
      std::string_view suffix = i < def.output_names.size() ? def.output_names[i] : "";
      output_name =
          suffix.empty() ? fmt::format("{}.{}", name, i) : fmt::format("{}.{}", name, suffix);
    }
    outputs.emplace_back(std::move(output_name), std::move((*output_types)[i]));
  }
  return AddNodeWithOutputs(op, std::move(inputs), std::move(attrs), std::move(name), phase,
                            std::move(outputs));
}

NodeId Graph::AddNodeWithOutputs(OpKind op, std::vector<ValueId> inputs, AttrMap attrs,
                                 std::string name, Phase phase,
                                 std::vector<std::pair<std::string, TensorType>> outputs) {
  Node node;
  node.id = static_cast<NodeId>(nodes_.size());
  node.name = UniqueNodeName(std::move(name));
  node.op = op;
  node.attrs = std::move(attrs);
  node.inputs = std::move(inputs);
  node.phase = phase;
  node_by_name_.emplace(node.name, node.id);
  for (size_t i = 0; i < outputs.size(); ++i) {
    node.outputs.push_back(NewValue(std::move(outputs[i].first), std::move(outputs[i].second),
                                    ValueKind::kIntermediate, node.id, static_cast<int>(i)));
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

void Graph::AddControlInput(NodeId node, NodeId predecessor) {
  std::vector<NodeId>& control = mutable_node(node).control_inputs;
  if (std::find(control.begin(), control.end(), predecessor) == control.end()) {
    control.push_back(predecessor);
  }
}

std::optional<ValueId> Graph::FindValue(std::string_view name) const {
  auto it = value_by_name_.find(std::string(name));
  if (it == value_by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeId> Graph::FindNode(std::string_view name) const {
  auto it = node_by_name_.find(std::string(name));
  if (it == node_by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::vector<NodeId>> Graph::Users() const {
  std::vector<std::vector<NodeId>> users(values_.size());
  for (const Node& node : nodes_) {
    for (ValueId input : node.inputs) {
      if (input < 0 || input >= num_values()) continue;
      std::vector<NodeId>& list = users[static_cast<size_t>(input)];
      if (list.empty() || list.back() != node.id) list.push_back(node.id);
    }
  }
  return users;
}

std::vector<NodeId> Graph::TopologicalOrder() const {
  const size_t n = nodes_.size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<NodeId>> successors(n);
  for (const Node& node : nodes_) {
    auto add_edge = [&](NodeId from) {
      if (from < 0 || static_cast<size_t>(from) >= n) return;
      successors[static_cast<size_t>(from)].push_back(node.id);
      ++pending[static_cast<size_t>(node.id)];
    };
    for (ValueId input : node.inputs) {
      if (input >= 0 && input < num_values()) add_edge(value(input).producer);
    }
    for (NodeId control : node.control_inputs) add_edge(control);
  }
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(static_cast<NodeId>(i));
  }
  std::vector<NodeId> order;
  order.reserve(n);
  while (!ready.empty()) {
    NodeId next = ready.top();
    ready.pop();
    order.push_back(next);
    for (NodeId successor : successors[static_cast<size_t>(next)]) {
      if (--pending[static_cast<size_t>(successor)] == 0) ready.push(successor);
    }
  }
  if (order.size() != n) return {};
  return order;
}

std::vector<ValueId> Graph::InputsOfKind(ValueKind kind) const {
  std::vector<ValueId> result;
  for (ValueId id : inputs_) {
    if (value(id).kind == kind) result.push_back(id);
  }
  return result;
}

absl::Status CheckGraphSize(const Graph& graph) {
  if (graph.total_bytes() <= kMaxGraphBytes) return absl::OkStatus();
  const Value* largest = nullptr;
  int64_t largest_bytes = -1;
  for (const Value& value : graph.values()) {
    const int64_t bytes = value.type.Bytes().value_or(std::numeric_limits<int64_t>::max());
    if (bytes > largest_bytes) {
      largest = &value;
      largest_bytes = bytes;
    }
  }
  const std::string total = graph.total_bytes() == std::numeric_limits<int64_t>::max()
                                ? std::string("more than 8 EiB")
                                : FormatBytes(graph.total_bytes());
  return absl::InvalidArgumentError(fmt::format(
      "the {} graph's tensors add up to {}, over the {} Spillway plans for (the largest is "
      "'{}', {}): use a smaller batch or image",
      graph.name(), total, FormatBytes(kMaxGraphBytes), largest->name,
      ir::TypeToString(largest->type)));
}

}  // namespace spillway::ir
