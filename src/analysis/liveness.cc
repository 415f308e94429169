#include "analysis/liveness.h"

#include <algorithm>

#include "ir/op_registry.h"
#include "support/check.h"

namespace spillway::analysis {

Liveness Liveness::Analyze(const ir::Graph& graph, std::span<const ir::NodeId> order) {
  SPILLWAY_CHECK(static_cast<int64_t>(order.size()) == graph.num_nodes(),
                 "the schedule must contain every node");
  Liveness live;
  live.order_.assign(order.begin(), order.end());
  const size_t num_values = static_cast<size_t>(graph.num_values());
  live.buffer_of_value_.assign(num_values, -1);
  live.step_of_node_.assign(static_cast<size_t>(graph.num_nodes()), -1);
  live.first_use_.assign(num_values, -1);
  live.last_use_.assign(num_values, -1);

  for (ir::ValueId input : graph.inputs()) {
    live.buffer_of_value_[static_cast<size_t>(input)] = static_cast<int>(live.buffers_.size());
    live.buffers_.push_back({input, graph.value(input).type.bytes(), true, 0, 0});
  }

  const int last_step = static_cast<int>(order.size()) - 1;
  for (int step = 0; step < static_cast<int>(order.size()); ++step) {
    const ir::Node& node = graph.node(order[static_cast<size_t>(step)]);
    live.step_of_node_[static_cast<size_t>(node.id)] = step;
    for (ir::ValueId input : node.inputs) {
      const size_t index = static_cast<size_t>(input);
      SPILLWAY_CHECK(live.buffer_of_value_[index] >= 0, "schedule reads a value before it exists");
      if (live.first_use_[index] < 0) live.first_use_[index] = step;
      live.last_use_[index] = step;
      BufferLiveness& buffer = live.buffers_[static_cast<size_t>(live.buffer_of_value_[index])];
      buffer.last_step = std::max(buffer.last_step, step);
    }
    const ir::OpDef& def = ir::GetOpDef(node.op);
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ir::ValueId output = node.outputs[i];
      int buffer = -1;
      for (const auto& [out_index, in_index] : def.in_place) {
        if (out_index == static_cast<int>(i) && in_index < static_cast<int>(node.inputs.size())) {
          buffer = live.buffer_of_value_[static_cast<size_t>(
              node.inputs[static_cast<size_t>(in_index)])];
        }
      }
      if (buffer < 0) {
        buffer = static_cast<int>(live.buffers_.size());
        live.buffers_.push_back({output, graph.value(output).type.bytes(), false, step, step});
      }
      live.buffer_of_value_[static_cast<size_t>(output)] = buffer;
      BufferLiveness& b = live.buffers_[static_cast<size_t>(buffer)];
      b.last_step = std::max(b.last_step, step);
    }
  }
  for (ir::ValueId output : graph.outputs()) {
    BufferLiveness& buffer =
        live.buffers_[static_cast<size_t>(live.buffer_of_value_[static_cast<size_t>(output)])];
    buffer.last_step = last_step;
  }
  for (BufferLiveness& buffer : live.buffers_) {
    if (buffer.persistent) buffer.last_step = std::max(last_step, 0);
  }
  return live;
}

MemoryCurve Liveness::NaiveMemoryCurve() const {
  MemoryCurve curve;
  const size_t steps = order_.size();
  // Allocation deltas: +bytes at the first step, -bytes after the last.
  std::vector<int64_t> delta(steps + 1, 0);
  for (const BufferLiveness& buffer : buffers_) {
    if (buffer.persistent) {
      curve.persistent_bytes += buffer.bytes;
      continue;
    }
    delta[static_cast<size_t>(buffer.first_step)] += buffer.bytes;
    delta[static_cast<size_t>(buffer.last_step) + 1] -= buffer.bytes;
  }
  curve.bytes_at_step.resize(steps);
  int64_t resident = curve.persistent_bytes;
  curve.peak_bytes = resident;
  for (size_t step = 0; step < steps; ++step) {
    resident += delta[step];
    curve.bytes_at_step[step] = resident;
    if (curve.peak_node == ir::kNoNode || resident > curve.peak_bytes) {
      curve.peak_bytes = resident;
      curve.peak_step = static_cast<int>(step);
      curve.peak_node = order_[step];
    }
  }
  return curve;
}

}  // namespace spillway::analysis
