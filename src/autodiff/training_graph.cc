#include "autodiff/training_graph.h"

#include <algorithm>

#include "autodiff/gradients.h"
#include "fmt/format.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "support/check.h"
#include "support/option_check.h"
#include "support/status_macros.h"

namespace spillway::autodiff {
namespace {

using ir::kInvalidValue;
using ir::OpKind;
using ir::ValueId;

// Values whose gradient the loss can need: parameters and everything computed
// from them. This follows every op, differentiable or not, so that an op
// without a gradient rule on the way from a parameter to the loss is reported
// rather than silently cutting the parameter off.
std::vector<bool> DependsOnParameters(const ir::Graph& graph,
                                      const std::vector<ir::NodeId>& order) {
  std::vector<bool> depends(static_cast<size_t>(graph.num_values()), false);
  for (ValueId id : graph.InputsOfKind(ir::ValueKind::kParameter)) {
    depends[static_cast<size_t>(id)] = true;
  }
  for (ir::NodeId id : order) {
    const ir::Node& node = graph.node(id);
    const bool any = std::any_of(node.inputs.begin(), node.inputs.end(),
                                 [&](ValueId v) { return depends[static_cast<size_t>(v)]; });
    if (!any) continue;
    for (ValueId out : node.outputs) depends[static_cast<size_t>(out)] = true;
  }
  return depends;
}

absl::Status AddUpdates(TrainingGraph& result, const OptimizerOptions& options) {
  ir::Graph& graph = result.graph;
  ValueId step = kInvalidValue;
  if (options.kind == OptimizerKind::kAdam && !result.param_grads.empty()) {
    step = graph.AddInput("adam.step", ir::I64({}), ir::ValueKind::kOptimizerState);
    result.adam_step = step;
  }
  for (ValueId param : graph.InputsOfKind(ir::ValueKind::kParameter)) {
    auto grad = result.param_grads.find(param);
    if (grad == result.param_grads.end()) continue;
    const ir::Value value = graph.value(param);
    absl::StatusOr<ir::NodeId> node;
    if (options.kind == OptimizerKind::kSgd) {
      std::vector<ValueId> inputs = {param, grad->second};
      if (options.momentum != 0.0) {
        inputs.push_back(
            graph.AddInput("momentum/" + value.name, value.type, ir::ValueKind::kOptimizerState));
        result.optimizer_state[param] = {inputs.back()};
      }
      ir::AttrMap attrs = {{"lr", options.lr},
                           {"momentum", options.momentum},
                           {"weight_decay", options.weight_decay}};
      if (options.nesterov) attrs.Set("nesterov", true);
      node = graph.AddNode(OpKind::kSgdUpdate, std::move(inputs), std::move(attrs),
                           "update/" + value.name, ir::Phase::kUpdate);
    } else {
      const ValueId m =
          graph.AddInput("adam.m/" + value.name, value.type, ir::ValueKind::kOptimizerState);
      const ValueId v =
          graph.AddInput("adam.v/" + value.name, value.type, ir::ValueKind::kOptimizerState);
      result.optimizer_state[param] = {m, v};
      node = graph.AddNode(OpKind::kAdamUpdate, {param, grad->second, m, v, step},
                           {{"lr", options.lr},
                            {"beta1", options.beta1},
                            {"beta2", options.beta2},
                            {"epsilon", options.epsilon},
                            {"weight_decay", options.weight_decay},
                            {"decoupled", options.decoupled}},
                           "update/" + value.name, ir::Phase::kUpdate);
    }
    if (!node.ok()) return node.status();
    result.updated_params[param] = graph.node(*node).outputs.front();
    for (ValueId out : graph.node(*node).outputs) graph.AddOutput(out);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptimizerOptions(const OptimizerOptions& optimizer) {
  RETURN_IF_ERROR(CheckNumber("the learning rate", optimizer.lr, kPositiveNumber));
  RETURN_IF_ERROR(CheckNumber("the weight decay", optimizer.weight_decay, kNonNegativeNumber));
  RETURN_IF_ERROR(CheckNumber("the momentum", optimizer.momentum, kFraction));
  RETURN_IF_ERROR(CheckNumber("Adam's beta1", optimizer.beta1, kFraction));
  RETURN_IF_ERROR(CheckNumber("Adam's beta2", optimizer.beta2, kFraction));
  return CheckNumber("Adam's epsilon", optimizer.epsilon, kPositiveNumber);
}

absl::StatusOr<TrainingGraph> BuildTrainingGraph(const ir::Graph& forward,
                                                 const OptimizerOptions& optimizer) {
  RETURN_IF_ERROR(ValidateOptimizerOptions(optimizer));
  for (const ir::Node& node : forward.nodes()) {
    if (node.phase != ir::Phase::kForward) {
      return absl::InvalidArgumentError(
          fmt::format("node '{}' ({}) is in the {} phase: the input must be a forward graph",
                      node.name, ir::OpName(node.op), ir::PhaseName(node.phase)));
    }
  }
  if (forward.outputs().size() != 1) {
    return absl::InvalidArgumentError(
        fmt::format("the forward graph must have exactly one output, the loss; it has {}",
                    forward.outputs().size()));
  }
  const ValueId loss = forward.outputs().front();
  const ir::TensorType& loss_type = forward.value(loss).type;
  if (!loss_type.shape.empty() || !ir::IsFloating(loss_type.dtype)) {
    return absl::InvalidArgumentError(fmt::format("the loss '{}' must be a float scalar, got {}",
                                                  forward.value(loss).name,
                                                  ir::TypeToString(loss_type)));
  }
  const std::vector<ir::NodeId> order = forward.TopologicalOrder();
  if (static_cast<int64_t>(order.size()) != forward.num_nodes()) {
    return absl::InvalidArgumentError("the forward graph has a cycle");
  }

  TrainingGraph result;
  result.graph = forward;
  result.loss = loss;
  ir::Graph& graph = result.graph;
  // Forward values updated in place (running statistics) are results of the step.
  for (ir::NodeId id : order) {
    const ir::Node& node = forward.node(id);
    for (const auto& [out, in] : ir::GetOpDef(node.op).in_place) {
      if (out < static_cast<int>(node.outputs.size())) {
        graph.AddOutput(node.outputs[static_cast<size_t>(out)]);
      }
    }
  }

  const std::vector<bool> depends = DependsOnParameters(forward, order);
  std::vector<std::vector<ValueId>> partials(static_cast<size_t>(forward.num_values()));
  ASSIGN_OR_RETURN(ir::NodeId seed,
                   graph.AddNode(OpKind::kFill, {},
                                 {{"shape", ir::IntList{}},
                                  {"value", 1.0},
                                  {"dtype", std::string(ir::DTypeName(loss_type.dtype))}},
                                 "grad/" + forward.value(loss).name, ir::Phase::kBackward));
  partials[static_cast<size_t>(loss)].push_back(graph.node(seed).outputs.front());

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node node = forward.node(*it);
    std::vector<ValueId> output_grads;
    bool any_grad = false;
    for (ValueId out : node.outputs) {
      const std::vector<ValueId>& list = partials[static_cast<size_t>(out)];
      ValueId total = kInvalidValue;
      if (!list.empty()) {
        ASSIGN_OR_RETURN(total, Accumulate(graph, forward.value(out), list));
        any_grad = true;
      }
      output_grads.push_back(total);
    }
    if (!any_grad) continue;
    std::vector<bool> wants;
    bool any_wanted = false;
    for (ValueId in : node.inputs) {
      const bool want =
          depends[static_cast<size_t>(in)] && ir::IsFloating(forward.value(in).type.dtype);
      wants.push_back(want);
      any_wanted = any_wanted || want;
    }
    // Only the first output of the multi-output ops (batch norm, layer norm)
    // carries a gradient; their statistics feed nothing differentiable.
    if (!any_wanted || output_grads.front() == kInvalidValue) continue;
    if (!HasGradientRule(node.op)) {
      return absl::UnimplementedError(
          fmt::format("node '{}': op {} is on the path to the loss but has no gradient rule",
                      node.name, ir::OpName(node.op)));
    }
    std::vector<std::vector<ValueId>> earlier;
    for (ValueId in : node.inputs) earlier.push_back(partials[static_cast<size_t>(in)]);
    GradientContext context(graph, node, output_grads, wants, std::move(earlier));
    RETURN_IF_ERROR(ApplyGradientRule(context));
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId grad = context.input_grads()[i];
      if (grad == kInvalidValue) continue;
      std::vector<ValueId>& list = partials[static_cast<size_t>(node.inputs[i])];
      // A rule that added the earlier partials into its gradient replaces them.
      if (context.took_earlier_grads(i)) list.clear();
      list.push_back(grad);
    }
  }

  for (ValueId param : forward.InputsOfKind(ir::ValueKind::kParameter)) {
    const std::vector<ValueId>& list = partials[static_cast<size_t>(param)];
    if (list.empty()) {
      result.params_without_gradient.push_back(param);
      continue;
    }
    ASSIGN_OR_RETURN(ValueId grad, Accumulate(graph, forward.value(param), list));
    result.param_grads[param] = grad;
  }
  RETURN_IF_ERROR(AddUpdates(result, optimizer));
  RETURN_IF_ERROR(ir::CheckGraphSize(result.graph));
  return result;
}

}  // namespace spillway::autodiff
