#include "analysis/summary.h"

#include <algorithm>

#include "analysis/liveness.h"
#include "autodiff/saved_tensors.h"
#include "ir/op_registry.h"
#include "support/check.h"

namespace spillway::analysis {

GraphSummary Summarize(const ir::Graph& training, int top_saved) {
  GraphSummary summary;
  for (ir::ValueId input : training.inputs()) {
    const ir::Value& value = training.value(input);
    const int64_t bytes = value.type.bytes();
    switch (value.kind) {
      case ir::ValueKind::kParameter:
        summary.parameters += *ir::NumElements(value.type.shape);
        summary.parameter_bytes += bytes;
        break;
      case ir::ValueKind::kBuffer:
        summary.buffer_bytes += bytes;
        break;
      case ir::ValueKind::kOptimizerState:
        summary.optimizer_state_bytes += bytes;
        break;
      case ir::ValueKind::kInput:
      case ir::ValueKind::kIntermediate:
        summary.input_bytes += bytes;
        break;
    }
  }
  for (const ir::Node& node : training.nodes()) {
    const ir::OpCost cost = ir::NodeCost(training, node);
    switch (node.phase) {
      case ir::Phase::kForward:
        ++summary.forward_nodes;
        summary.forward_macs += cost.macs;
        summary.forward_flops += cost.flops;
        break;
      case ir::Phase::kBackward:
        ++summary.backward_nodes;
        summary.backward_flops += cost.flops;
        break;
      case ir::Phase::kUpdate:
        ++summary.update_nodes;
        summary.update_flops += cost.flops;
        break;
    }
  }

  std::vector<autodiff::SavedTensor> saved = autodiff::SavedTensors(training);
  summary.saved_tensors = static_cast<int64_t>(saved.size());
  for (const autodiff::SavedTensor& tensor : saved) summary.saved_bytes += tensor.bytes;
  std::stable_sort(saved.begin(), saved.end(),
                   [](const autodiff::SavedTensor& a, const autodiff::SavedTensor& b) {
                     return a.bytes > b.bytes;
                   });
  for (size_t i = 0; i < saved.size() && static_cast<int>(i) < top_saved; ++i) {
    const ir::Value& value = training.value(saved[i].value);
    SavedTensorSummary entry;
    entry.name = value.name;
    if (value.producer != ir::kNoNode) {
      const ir::Node& producer = training.node(value.producer);
      entry.producer = producer.name;
      entry.op = std::string(ir::OpName(producer.op));
    }
    entry.type = value.type;
    entry.bytes = saved[i].bytes;
    summary.largest_saved.push_back(std::move(entry));
  }

  const std::vector<ir::NodeId> order = training.TopologicalOrder();
  SPILLWAY_CHECK(static_cast<int64_t>(order.size()) == training.num_nodes(),
                 "training graph has a cycle");
  const Liveness liveness = Liveness::Analyze(training, order);
  const MemoryCurve curve = liveness.NaiveMemoryCurve();
  summary.steps = static_cast<int64_t>(order.size());
  summary.peak_bytes = curve.peak_bytes;
  summary.peak_step = curve.peak_step;
  if (curve.peak_node != ir::kNoNode) {
    const ir::Node& node = training.node(curve.peak_node);
    summary.peak_node = node.name;
    summary.peak_op = std::string(ir::OpName(node.op));
    summary.peak_phase = node.phase;
  }
  return summary;
}

}  // namespace spillway::analysis
