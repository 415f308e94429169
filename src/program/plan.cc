#include "program/plan.h"

#include <algorithm>

#include "fmt/format.h"
#include "ir/op_registry.h"
#include "support/status_macros.h"

namespace spillway::program {

std::string_view DecisionName(Decision decision) {
  switch (decision) {
    case Decision::kKeep:
      return "keep";
    case Decision::kSpill:
      return "spill";
    case Decision::kRecompute:
      return "recompute";
  }
  return "?";
}

std::optional<Decision> ParseDecision(std::string_view name) {
  for (Decision decision : {Decision::kKeep, Decision::kSpill, Decision::kRecompute}) {
    if (DecisionName(decision) == name) return decision;
  }
  return std::nullopt;
}

std::vector<std::pair<ir::ValueId, TensorPlan>> Plan::Changes() const {
  std::vector<std::pair<ir::ValueId, TensorPlan>> changes;
  for (size_t v = 0; v < tensors_.size(); ++v) {
    if (!(tensors_[v] == TensorPlan{}))
      changes.emplace_back(static_cast<ir::ValueId>(v), tensors_[v]);
  }
  return changes;
}

int Plan::Count(Decision decision) const {
  return static_cast<int>(std::count_if(tensors_.begin(), tensors_.end(), [&](const TensorPlan& t) {
    return t.decision == decision;
  }));
}

int Plan::CountRefetched() const {
  return static_cast<int>(std::count_if(tensors_.begin(), tensors_.end(), [](const TensorPlan& t) {
    return t.decision == Decision::kSpill && t.refetch_after >= 0;
  }));
}

namespace {

// Produced by a forward node and not an in-place alias of one of its inputs.
bool IsForwardActivation(const ir::Graph& graph, ir::ValueId value) {
  const ir::Value& v = graph.value(value);
  if (v.producer == ir::kNoNode) return false;
  const ir::Node& producer = graph.node(v.producer);
  if (producer.phase != ir::Phase::kForward) return false;
  for (const auto& [output, input] : ir::GetOpDef(producer.op).in_place) {
    if (output == v.output_index) return false;
  }
  return true;
}

}  // namespace

bool CanSpill(const ir::Graph& graph, ir::ValueId value) {
  return IsForwardActivation(graph, value);
}

bool CanSpillBetweenReads(const ir::Graph& graph, ir::ValueId value) {
  if (CanSpill(graph, value)) return true;
  const ir::Value& v = graph.value(value);
  if (v.producer == ir::kNoNode || v.kind != ir::ValueKind::kIntermediate) return false;
  const ir::Node& producer = graph.node(v.producer);
  if (producer.phase != ir::Phase::kBackward) return false;
  for (const auto& [output, input] : ir::GetOpDef(producer.op).in_place) {
    if (output == v.output_index) return false;
  }
  return std::find(graph.outputs().begin(), graph.outputs().end(), value) == graph.outputs().end();
}

bool CanRecompute(const ir::Graph& graph, ir::ValueId value) {
  if (!IsForwardActivation(graph, value)) return false;
  const ir::Value& v = graph.value(value);
  if (v.output_index != 0) return false;
  const ir::Node& producer = graph.node(v.producer);
  // The loss is the graph's output: it lives to the end of the step anyway.
  return ir::GetOpDef(producer.op).op_class != ir::OpClass::kLoss;
}

absl::StatusOr<std::vector<Pin>> ReadPins(const ir::Graph& graph) {
  std::vector<Pin> pins;
  for (const ir::Node& node : graph.nodes()) {
    if (!node.attrs.Has(kMemoryAttr)) continue;
    absl::StatusOr<std::string> pin = node.attrs.GetString(kMemoryAttr);
    if (!pin.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("node '{}': attribute '{}' must be a string", node.name, kMemoryAttr));
    }
    std::optional<Decision> decision = ParseDecision(*pin);
    if (!decision) {
      return absl::InvalidArgumentError(fmt::format(
          "node '{}': {} = \"{}\" is not keep, spill or recompute", node.name, kMemoryAttr, *pin));
    }
    if (node.outputs.empty()) continue;
    const ir::ValueId value = node.outputs.front();
    if (*decision == Decision::kSpill && !CanSpill(graph, value)) {
      return absl::InvalidArgumentError(
          fmt::format("node '{}' ({}): its output cannot be spilled: only forward activations can",
                      node.name, ir::OpName(node.op)));
    }
    if (*decision == Decision::kRecompute && !CanRecompute(graph, value)) {
      return absl::InvalidArgumentError(fmt::format(
          "node '{}' ({}): its output cannot be recomputed", node.name, ir::OpName(node.op)));
    }
    pins.push_back({value, *decision});
  }
  return pins;
}

void ApplyPins(std::span<const Pin> pins, Plan& plan) {
  for (const Pin& pin : pins) {
    switch (pin.decision) {
      case Decision::kKeep:
        plan.Keep(pin.value);
        break;
      case Decision::kSpill:
        plan.Spill(pin.value);
        break;
      case Decision::kRecompute:
        plan.Recompute(pin.value);
        break;
    }
  }
}

absl::Status ApplyPins(const ir::Graph& graph, Plan& plan) {
  ASSIGN_OR_RETURN(const std::vector<Pin> pins, ReadPins(graph));
  ApplyPins(pins, plan);
  return absl::OkStatus();
}

}  // namespace spillway::program
