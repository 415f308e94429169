// The graph IR: values in SSA form, nodes with an op kind, typed attributes,
// data inputs and control inputs, and a deterministic topological order.
//
// A forward graph (from a model builder or an ONNX file) and the training graph
// that autodiff makes from it are both Graphs; each node carries the phase it
// belongs to. Nodes are stored in creation order and a node's inputs must exist
// when it is added, so creation order is always one topological order.
//
// Values and nodes live in deques: a reference to one stays valid while more
// are added. Passes rely on it (a gradient rule holds its forward node and the
// types of its operands while it emits backward nodes).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/types.h"

namespace spillway::ir {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;
inline constexpr ValueId kInvalidValue = -1;

enum class Phase : uint8_t { kForward, kBackward, kUpdate };
std::string_view PhaseName(Phase phase);  // "forward", "backward", "update"
std::optional<Phase> ParsePhase(std::string_view name);

// What a value is for. Graph inputs have one of the first four kinds; every
// value a node produces is kIntermediate (activations, gradients, temporaries).
enum class ValueKind : uint8_t {
  kInput,           // fed each step: images, tokens, labels
  kParameter,       // trained weights
  kBuffer,          // persistent state that is not trained: batch-norm running statistics
  kOptimizerState,  // momentum, Adam moments, step counter
  kIntermediate,
};
std::string_view ValueKindName(ValueKind kind);  // "input", "param", "buffer", "state", ...
std::optional<ValueKind> ParseValueKind(std::string_view name);

struct Value {
  ValueId id = 0;
  std::string name;
  TensorType type;
  ValueKind kind = ValueKind::kIntermediate;
  NodeId producer = kNoNode;  // kNoNode for graph inputs
  int output_index = 0;
};

struct Node {
  NodeId id = 0;
  std::string name;
  OpKind op = OpKind::kRelu;
  AttrMap attrs;
  std::vector<ValueId> inputs;
  std::vector<NodeId> control_inputs;  // must run before this node; no data flows
  std::vector<ValueId> outputs;
  Phase phase = Phase::kForward;
};

class Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // A graph input. Names are unique; a taken name gets a numeric suffix.
  ValueId AddInput(std::string name, TensorType type, ValueKind kind = ValueKind::kInput);

  // Adds a node, validating its attributes and inferring its output types with
  // the op registry. Errors name the node, its op and the offending shapes.
  // Outputs are named after the node: "conv1" for a single output,
  // "bn1.saved_mean" for the named outputs of multi-output ops.
  absl::StatusOr<NodeId> AddNode(OpKind op, std::vector<ValueId> inputs, AttrMap attrs,
                                 std::string name, Phase phase = Phase::kForward);

  // Adds a node whose output types and names are given, without inference;
  // the text-format parser uses it, and the verifier checks the types after.
  NodeId AddNodeWithOutputs(OpKind op, std::vector<ValueId> inputs, AttrMap attrs, std::string name,
                            Phase phase, std::vector<std::pair<std::string, TensorType>> outputs);

  void AddControlInput(NodeId node, NodeId predecessor);
  void AddOutput(ValueId value) { outputs_.push_back(value); }

  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& mutable_node(NodeId id) { return nodes_.at(static_cast<size_t>(id)); }
  const std::deque<Value>& values() const { return values_; }
  const std::deque<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  int64_t num_values() const { return static_cast<int64_t>(values_.size()); }
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size()); }

  std::optional<ValueId> FindValue(std::string_view name) const;
  std::optional<NodeId> FindNode(std::string_view name) const;

  // For every value, the nodes that read it, each once, in node order.
  std::vector<std::vector<NodeId>> Users() const;

  // Kahn's algorithm over data and control edges, ties broken by the smaller
  // node id: the same graph always gives the same order. Empty if there is a
  // cycle (the verifier reports which nodes are on it).
  std::vector<NodeId> TopologicalOrder() const;

  // Graph inputs of one kind, in input order.
  std::vector<ValueId> InputsOfKind(ValueKind kind) const;

  // The bytes of all values together, clamped to the largest int64_t (a value
  // whose own size overflows counts as that).
  int64_t total_bytes() const { return total_bytes_; }

 private:
  std::string UniqueValueName(std::string name);
  std::string UniqueNodeName(std::string name);
  ValueId NewValue(std::string name, TensorType type, ValueKind kind, NodeId producer,
                   int output_index);

  std::string name_;
  std::deque<Value> values_;
  std::deque<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  absl::flat_hash_map<std::string, ValueId> value_by_name_;
  absl::flat_hash_map<std::string, NodeId> node_by_name_;
  int64_t total_bytes_ = 0;
};

// The most bytes a graph's values may add up to: 4 PiB, beyond any machine
// Spillway plans for, and small enough that every sum a later stage forms
// from them (arena offsets, live bytes, host pools, a rewritten program's
// copies and recomputed clones) fits in int64_t with room to spare. Checking
// it once where a graph is built is what keeps those sums from wrapping.
inline constexpr int64_t kMaxGraphBytes = int64_t{1} << 52;

// OK, or InvalidArgument naming the graph's total and the largest value when
// its values add up to more than kMaxGraphBytes.
absl::Status CheckGraphSize(const Graph& graph);

}  // namespace spillway::ir
