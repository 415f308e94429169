#include "ir/verifier.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "ir/op_registry.h"
#include "support/status_macros.h"

namespace spillway::ir {
namespace {

// A report longer than this is cut: past a hundred problems the graph is
// broken wholesale and the first ones say why.
constexpr size_t kMaxReportedProblems = 100;

class Verifier {
 public:
  explicit Verifier(const Graph& graph) : graph_(graph) {}

  absl::Status Run() {
    CheckIds();
    CheckGraphInputs();
    CheckValues();
    CheckNames();
    for (const Node& node : graph_.nodes()) CheckNode(node);
    CheckCycles();
    CheckGraphOutputs();
    if (problems_.empty()) return absl::OkStatus();
    std::string report;
    for (size_t i = 0; i < problems_.size() && i < kMaxReportedProblems; ++i) {
      if (i > 0) report += '\n';
      report += problems_[i];
    }
    if (problems_.size() > kMaxReportedProblems) {
      report += fmt::format("\n... and {} more problems", problems_.size() - kMaxReportedProblems);
    }
    return absl::InvalidArgumentError(report);
  }

 private:
  bool ValidValue(ValueId id) const { return id >= 0 && id < graph_.num_values(); }
  bool ValidNode(NodeId id) const { return id >= 0 && id < graph_.num_nodes(); }

  std::string ValueLabel(ValueId id) const { return "%" + graph_.value(id).name; }
  std::string NodeLabel(const Node& node) const {
    return fmt::format("node '{}' ({})", node.name, OpName(node.op));
  }

  template <typename... Args>
  void Report(fmt::format_string<Args...> format, Args&&... args) {
    problems_.push_back(fmt::format(format, std::forward<Args>(args)...));
  }

  // Ids index the graph's vectors; everything else relies on it.
  void CheckIds() {
    for (size_t i = 0; i < graph_.values().size(); ++i) {
      const Value& value = graph_.values()[i];
      if (value.id != static_cast<ValueId>(i)) {
        Report("value %{} has id {} but is stored at index {}", value.name, value.id, i);
      }
    }
    for (size_t i = 0; i < graph_.nodes().size(); ++i) {
      const Node& node = graph_.nodes()[i];
      if (node.id != static_cast<NodeId>(i)) {
        Report("{} has id {} but is stored at index {}", NodeLabel(node), node.id, i);
      }
    }
  }

  void CheckGraphInputs() {
    for (size_t k = 0; k < graph_.inputs().size(); ++k) {
      ValueId id = graph_.inputs()[k];
      if (!ValidValue(id)) {
        Report("graph input {} refers to value {}, which does not exist", k, id);
        continue;
      }
      if (!graph_inputs_.insert(id).second) {
        Report("value {} is listed twice as a graph input", ValueLabel(id));
        continue;
      }
      const Value& value = graph_.value(id);
      if (value.kind == ValueKind::kIntermediate) {
        Report(
            "graph input {} has kind intermediate; a graph input is an input, param, buffer or "
            "state",
            ValueLabel(id));
      }
      if (value.producer != kNoNode) {
        std::string producer = ValidNode(value.producer) ? NodeLabel(graph_.node(value.producer))
                                                         : fmt::format("node {}", value.producer);
        Report("graph input {} also names a producer, {}", ValueLabel(id), producer);
      }
    }
  }

  void CheckValues() {
    for (const Value& value : graph_.values()) {
      if (value.producer == kNoNode) {
        if (!graph_inputs_.contains(value.id)) {
          Report("value {} has no producer and is not a graph input", ValueLabel(value.id));
        }
        continue;
      }
      if (graph_inputs_.contains(value.id)) continue;  // reported with the graph inputs
      if (!ValidNode(value.producer)) {
        Report("value {} names producer node {}, which does not exist", ValueLabel(value.id),
               value.producer);
        continue;
      }
      const Node& producer = graph_.node(value.producer);
      if (value.output_index < 0 ||
          static_cast<size_t>(value.output_index) >= producer.outputs.size() ||
          producer.outputs[static_cast<size_t>(value.output_index)] != value.id) {
        Report("value {} claims to be output {} of {}, which does not list it there",
               ValueLabel(value.id), value.output_index, NodeLabel(producer));
      }
      if (value.kind != ValueKind::kIntermediate) {
        Report("value {} is produced by {} but has kind {}; produced values are intermediate",
               ValueLabel(value.id), NodeLabel(producer), ValueKindName(value.kind));
      }
    }
  }

  void CheckNames() {
    std::map<std::string, ValueId> values;
    for (const Value& value : graph_.values()) {
      auto [it, inserted] = values.emplace(value.name, value.id);
      if (!inserted) {
        Report("value name %{} is used by values {} and {}", value.name, it->second, value.id);
      }
    }
    std::map<std::string, NodeId> nodes;
    for (const Node& node : graph_.nodes()) {
      auto [it, inserted] = nodes.emplace(node.name, node.id);
      if (!inserted) {
        Report("node name '{}' is used by nodes {} and {}", node.name, it->second, node.id);
      }
    }
  }

  std::string ProducerDescription(ValueId id) const {
    const Value& value = graph_.value(id);
    if (value.producer == kNoNode) {
      return graph_inputs_.contains(id) ? "a graph input" : "produced by no node";
    }
    if (!ValidNode(value.producer))
      return fmt::format("produced by missing node {}", value.producer);
    return fmt::format("output {} of {}", value.output_index,
                       NodeLabel(graph_.node(value.producer)));
  }

  void CheckNode(const Node& node) {
    bool inputs_exist = true;
    std::vector<TensorType> input_types;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId id = node.inputs[i];
      if (!ValidValue(id)) {
        Report("{}: input {} refers to value {}, which does not exist", NodeLabel(node), i, id);
        inputs_exist = false;
        continue;
      }
      input_types.push_back(graph_.value(id).type);
    }
    for (NodeId predecessor : node.control_inputs) {
      if (!ValidNode(predecessor)) {
        Report("{}: control input refers to node {}, which does not exist", NodeLabel(node),
               predecessor);
      }
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      ValueId id = node.outputs[i];
      if (!ValidValue(id)) {
        Report("{}: output {} refers to value {}, which does not exist", NodeLabel(node), i, id);
        continue;
      }
      const Value& value = graph_.value(id);
      if (value.producer != node.id || value.output_index != static_cast<int>(i)) {
        Report("{}: lists {} as output {}, but {} is {}", NodeLabel(node), ValueLabel(id), i,
               ValueLabel(id), ProducerDescription(id));
      }
    }
    if (!inputs_exist) return;

    absl::StatusOr<std::vector<TensorType>> inferred =
        InferOutputTypes(node.op, node.attrs, input_types);
    if (!inferred.ok()) {
      Report("{}: {}", NodeLabel(node), StatusMessage(inferred.status()));
      return;
    }
    if (inferred->size() != node.outputs.size()) {
      Report("{}: declares {} outputs, but the op has {}", NodeLabel(node), node.outputs.size(),
             inferred->size());
      return;
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      ValueId id = node.outputs[i];
      if (!ValidValue(id)) continue;
      const TensorType& declared = graph_.value(id).type;
      if (declared != (*inferred)[i]) {
        Report("{}: output {} {} is declared {} but the op infers {}", NodeLabel(node), i,
               ValueLabel(id), TypeToString(declared), TypeToString((*inferred)[i]));
      }
    }
  }

  // Data edges run from a value's producer to its readers, control edges from
  // the predecessor to the node; a depth-first search finds a back edge.
  void CheckCycles() {
    const size_t n = graph_.nodes().size();
    std::vector<std::vector<NodeId>> successors(n);
    for (const Node& node : graph_.nodes()) {
      if (!ValidNode(node.id)) return;  // reported by CheckIds; edges would be wrong
      std::set<NodeId> predecessors;
      for (ValueId input : node.inputs) {
        if (ValidValue(input) && ValidNode(graph_.value(input).producer)) {
          predecessors.insert(graph_.value(input).producer);
        }
      }
      for (NodeId control : node.control_inputs) {
        if (ValidNode(control)) predecessors.insert(control);
      }
      for (NodeId predecessor : predecessors) {
        successors[static_cast<size_t>(predecessor)].push_back(node.id);
      }
    }
    enum class Color { kUnvisited, kOnStack, kDone };
    std::vector<Color> color(n, Color::kUnvisited);
    for (size_t root = 0; root < n; ++root) {
      if (color[root] != Color::kUnvisited) continue;
      // The path from the root and, per node on it, the next successor to try.
      std::vector<std::pair<NodeId, size_t>> path = {{static_cast<NodeId>(root), 0}};
      color[root] = Color::kOnStack;
      while (!path.empty()) {
        auto& [current, next] = path.back();
        const std::vector<NodeId>& out = successors[static_cast<size_t>(current)];
        if (next == out.size()) {
          color[static_cast<size_t>(current)] = Color::kDone;
          path.pop_back();
          continue;
        }
        NodeId successor = out[next++];
        Color& successor_color = color[static_cast<size_t>(successor)];
        if (successor_color == Color::kOnStack) {
          ReportCycle(path, successor);
          return;  // one cycle says what is wrong; the rest are often the same loop
        }
        if (successor_color == Color::kUnvisited) {
          successor_color = Color::kOnStack;
          path.emplace_back(successor, 0);
        }
      }
    }
  }

  void ReportCycle(const std::vector<std::pair<NodeId, size_t>>& path, NodeId start) {
    std::vector<std::string> names;
    bool on_cycle = false;
    for (const auto& [id, next] : path) {
      if (id == start) on_cycle = true;
      if (on_cycle) names.push_back(fmt::format("'{}'", graph_.node(id).name));
    }
    names.push_back(fmt::format("'{}'", graph_.node(start).name));
    Report("cycle through nodes {}", fmt::join(names, " -> "));
  }

  void CheckGraphOutputs() {
    for (size_t k = 0; k < graph_.outputs().size(); ++k) {
      ValueId id = graph_.outputs()[k];
      if (!ValidValue(id))
        Report("graph output {} refers to value {}, which does not exist", k, id);
    }
  }

  const Graph& graph_;
  std::set<ValueId> graph_inputs_;
  std::vector<std::string> problems_;
};

}  // namespace

absl::Status VerifyGraph(const Graph& graph) { return Verifier(graph).Run(); }

}  // namespace spillway::ir
