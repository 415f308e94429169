#include "program/workspaces.h"

#include <algorithm>
#include <vector>

#include "ir/op_kind.h"
#include "program/workspace_sizes.h"

namespace spillway::program {

int64_t OwnKernelScratchBytes(ir::OpKind op, std::span<const ir::TensorType* const> inputs) {
  switch (op) {
    case ir::OpKind::kBatchNorm:
    case ir::OpKind::kBatchNormBackward: {
      const ir::TensorType& x = *inputs[op == ir::OpKind::kBatchNorm ? 0 : 1];
      const ir::MatrixExtent rows = ir::AsMatrix(x.shape);  // channels last
      return BatchNormScratchBytes(rows.rows, rows.columns);
    }
    case ir::OpKind::kCrossEntropyLoss:
    case ir::OpKind::kCrossEntropyLossBackward: {
      const ir::TensorType& labels = *inputs[op == ir::OpKind::kCrossEntropyLoss ? 1 : 2];
      return CrossEntropyScratchBytes(ir::NumElements(labels.shape).value_or(0));
    }
    default:
      return 0;
  }
}

int64_t PaddedCopyBytes(const ir::Node& convolution, const ir::TensorType& x) {
  const ir::IntList pads = *convolution.attrs.GetInts("pads", {0, 0, 0, 0});
  if (pads.size() != 4 || x.shape.size() != 4) return 0;
  if (pads[0] == pads[2] && pads[1] == pads[3]) return 0;
  const ir::Shape& s = x.shape;  // NHWC; one image of it
  return (s[1] + pads[0] + pads[2]) * (s[2] + pads[1] + pads[3]) * s[3] * ir::DTypeSize(x.dtype);
}

namespace {

bool IsConvolution(ir::OpKind op) {
  return op == ir::OpKind::kConv2d || op == ir::OpKind::kConv2dBackwardData ||
         op == ir::OpKind::kConv2dBackwardWeight;
}

}  // namespace

int64_t DeclaredWorkspaceBytes(const ir::Graph& graph, const ir::Node& node, int64_t limit) {
  if (limit <= 0) return 0;
  const auto type = [&](ir::ValueId id) -> const ir::TensorType& { return graph.value(id).type; };
  switch (node.op) {
    case ir::OpKind::kConv2d:
    case ir::OpKind::kConv2dBackwardData:
    case ir::OpKind::kConv2dBackwardWeight: {
      int64_t largest = 0;
      for (ir::ValueId id : node.inputs) largest = std::max(largest, type(id).bytes());
      for (ir::ValueId id : node.outputs) largest = std::max(largest, type(id).bytes());
      return std::min(limit, largest);
    }
    default: {
      std::vector<const ir::TensorType*> inputs;
      for (ir::ValueId id : node.inputs) inputs.push_back(&type(id));
      return OwnKernelScratchBytes(node.op, inputs);
    }
  }
}

int64_t WorkspaceRegionBytes(const ir::Graph& graph, int64_t limit) {
  int64_t region = 0;
  for (const ir::Node& node : graph.nodes()) {
    region = std::max(region, DeclaredWorkspaceBytes(graph, node, limit));
  }
  return region;
}

int64_t DeclaredScratchBytes(const ir::Graph& graph, const ir::Node& node, int64_t limit) {
  if (limit <= 0 || !IsConvolution(node.op)) return 0;
  // x, the forward's input: the backward data's output, the backward
  // filter's second input.
  const ir::ValueId x = node.op == ir::OpKind::kConv2d               ? node.inputs[0]
                        : node.op == ir::OpKind::kConv2dBackwardData ? node.outputs[0]
                                                                     : node.inputs[1];
  return PaddedCopyBytes(node, graph.value(x).type);
}

std::vector<int64_t> ScratchBytesByNode(const ir::Graph& graph, int64_t limit) {
  std::vector<int64_t> bytes(static_cast<size_t>(graph.num_nodes()), 0);
  bool any = false;
  for (const ir::Node& node : graph.nodes()) {
    bytes[static_cast<size_t>(node.id)] = DeclaredScratchBytes(graph, node, limit);
    any = any || bytes[static_cast<size_t>(node.id)] > 0;
  }
  if (!any) bytes.clear();
  return bytes;
}

}  // namespace spillway::program
