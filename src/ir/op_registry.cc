#include "ir/op_registry.h"

#include <array>

#include "fmt/format.h"
#include "ir/graph.h"
#include "ir/ops/op_defs.h"
#include "support/check.h"

namespace spillway::ir {
namespace {

class OpTable {
 public:
  OpTable() {
    std::vector<OpDef> defs;
    ops::RegisterConvolutionOps(defs);
    ops::RegisterNormalizationOps(defs);
    ops::RegisterElementwiseOps(defs);
    ops::RegisterPoolingOps(defs);
    ops::RegisterTensorOps(defs);
    ops::RegisterMatMulOps(defs);
    ops::RegisterLossOps(defs);
    ops::RegisterOptimizerOps(defs);
    ops::RegisterPlanningOps(defs);
    std::array<bool, kNumOpKinds> seen{};
    for (OpDef& def : defs) {
      size_t index = static_cast<size_t>(def.kind);
      SPILLWAY_CHECK(!seen[index], "op registered twice");
      seen[index] = true;
      defs_[index] = std::move(def);
    }
  }

  const OpDef& Get(OpKind kind) const {
    const OpDef& def = defs_[static_cast<size_t>(kind)];
    SPILLWAY_CHECK(def.infer != nullptr, "op has no definition in the registry");
    return def;
  }

 private:
  std::array<OpDef, kNumOpKinds> defs_;
};

const OpTable& Table() {
  static const OpTable* table = new OpTable();
  return *table;
}

}  // namespace

std::string_view OpClassName(OpClass op_class) {
  switch (op_class) {
    case OpClass::kConvolution:
      return "convolution";
    case OpClass::kMatMul:
      return "matmul";
    case OpClass::kElementwise:
      return "elementwise";
    case OpClass::kNormalization:
      return "normalization";
    case OpClass::kPooling:
      return "pooling";
    case OpClass::kReduction:
      return "reduction";
    case OpClass::kDataMovement:
      return "data_movement";
    case OpClass::kLoss:
      return "loss";
    case OpClass::kOptimizer:
      return "optimizer";
    case OpClass::kOpaque:
      return "opaque";
  }
  SPILLWAY_CHECK(false, "unknown op class");
}

const OpDef& GetOpDef(OpKind kind) { return Table().Get(kind); }

absl::StatusOr<std::vector<TensorType>> InferOutputTypes(OpKind kind, const AttrMap& attrs,
                                                         std::span<const TensorType> inputs) {
  const OpDef& def = GetOpDef(kind);
  const int count = static_cast<int>(inputs.size());
  if (count < def.min_inputs || (def.max_inputs >= 0 && count > def.max_inputs)) {
    std::string expected = def.max_inputs < 0 ? fmt::format("at least {}", def.min_inputs)
                           : def.min_inputs == def.max_inputs
                               ? fmt::format("{}", def.min_inputs)
                               : fmt::format("{} to {}", def.min_inputs, def.max_inputs);
    return absl::InvalidArgumentError(fmt::format("expects {} inputs, got {}", expected, count));
  }
  if (def.validate != nullptr) {
    absl::Status status = def.validate(attrs);
    if (!status.ok()) return status;
  }
  absl::StatusOr<std::vector<TensorType>> outputs = def.infer(attrs, inputs);
  if (!outputs.ok()) return outputs.status();
  for (size_t i = 0; i < outputs->size(); ++i) {
    if (!(*outputs)[i].Bytes().has_value()) {
      return absl::InvalidArgumentError(
          fmt::format("output {} of shape {} has more bytes than a 64-bit count can hold", i,
                      ShapeToString((*outputs)[i].shape)));
    }
  }
  return outputs;
}

OpCost BytesOnlyCost(std::span<const TensorType> inputs, std::span<const TensorType> outputs) {
  OpCost cost;
  for (const TensorType& t : inputs) cost.bytes_read += t.bytes();
  for (const TensorType& t : outputs) cost.bytes_written += t.bytes();
  return cost;
}

OpCost NodeCost(const Graph& graph, const Node& node) {
  std::vector<TensorType> inputs;
  std::vector<TensorType> outputs;
  for (ValueId v : node.inputs) inputs.push_back(graph.value(v).type);
  for (ValueId v : node.outputs) outputs.push_back(graph.value(v).type);
  const OpDef& def = GetOpDef(node.op);
  if (def.cost == nullptr) return BytesOnlyCost(inputs, outputs);
  return def.cost(node.attrs, inputs, outputs);
}

}  // namespace spillway::ir
