// Gradient rules: for each differentiable forward op, the backward nodes that
// compute the gradients of its inputs from the gradients of its outputs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::autodiff {

// What a rule sees and emits. `node` is a copy: the graph grows while the rule runs.
class GradientContext {
 public:
  // `earlier_grads[i]`, when given, lists the gradients of input i that its
  // other consumers (those later in the forward order) contributed so far.
  GradientContext(ir::Graph& graph, ir::Node node, std::vector<ir::ValueId> output_grads,
                  std::vector<bool> wants_input_grad,
                  std::vector<std::vector<ir::ValueId>> earlier_grads = {});

  const ir::Node& node() const { return node_; }
  const ir::TensorType& type(ir::ValueId value) const { return graph_.value(value).type; }
  ir::ValueId input(size_t i) const { return node_.inputs[i]; }
  ir::ValueId output(size_t i) const { return node_.outputs[i]; }
  // The gradient of output i, or ir::kInvalidValue if the loss does not depend on it.
  ir::ValueId dy(size_t i = 0) const { return output_grads_[i]; }
  bool wants(size_t input) const { return wants_input_grad_[input]; }

  // Adds a backward node named "bwd/<node>" + suffix and returns its outputs.
  std::vector<ir::ValueId> Emit(ir::OpKind op, std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                                const std::string& suffix);
  ir::ValueId EmitOne(ir::OpKind op, std::vector<ir::ValueId> inputs, ir::AttrMap attrs,
                      const std::string& suffix);
  // Sums `grad` over the axes along which `target` was broadcast, and reshapes
  // it to `target`'s type. Returns `grad` when the shapes already agree.
  ir::ValueId ReduceTo(ir::ValueId grad, const ir::TensorType& target, const std::string& suffix);

  // For a rule whose op can add into its result (conv2d_backward_data's acc
  // input): the sum of input i's earlier gradients, or ir::kInvalidValue if
  // there are none. The rule's gradient of input i then includes them, and
  // replaces them (took_earlier_grads). Summed in the order they came, so the
  // total is the add_n the caller would otherwise emit, bit for bit.
  ir::ValueId TakeEarlierGrads(size_t input);
  bool took_earlier_grads(size_t input) const { return took_[input]; }

  void SetInputGrad(size_t input, ir::ValueId grad);
  const std::vector<ir::ValueId>& input_grads() const { return input_grads_; }
  const absl::Status& status() const { return status_; }

 private:
  ir::Graph& graph_;
  ir::Node node_;
  std::vector<ir::ValueId> output_grads_;
  std::vector<bool> wants_input_grad_;
  std::vector<ir::ValueId> input_grads_;
  std::vector<std::vector<ir::ValueId>> earlier_grads_;
  std::vector<bool> took_;
  absl::Status status_;
};

// The sum of the partial gradients of `value`, with one add_n at fan-out
// (`grad/<value>.accumulate`), left to right; the partial itself when there
// is one. A partial of another type than the value is a bug in a rule,
// reported with both names.
absl::StatusOr<ir::ValueId> Accumulate(ir::Graph& graph, const ir::Value& value,
                                       const std::vector<ir::ValueId>& partials);

// Runs the rule of ctx.node().op. Unimplemented for an op without one.
absl::Status ApplyGradientRule(GradientContext& ctx);

// Whether an op has a gradient rule (every differentiable op must).
bool HasGradientRule(ir::OpKind op);

}  // namespace spillway::autodiff
