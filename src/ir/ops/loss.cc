// Softmax cross-entropy over the last axis, with its gradient.
#include <span>
#include <string>
#include <vector>

#include "ir/ops/op_defs.h"
#include "ir/ops/op_util.h"
#include "support/status_macros.h"

namespace spillway::ir::ops {
namespace {

using Types = std::vector<TensorType>;

// Per logit: the running max, the subtraction, exp (counted as 4) and the sum
// of the log-sum-exp; the log and the label's gather happen once per row and
// are not counted. The backward recomputes the log-sum-exp (the same 7), then
// per logit exp(x - lse) (5), subtracts the one-hot label and scales by dloss.
constexpr int64_t kCrossEntropyFlopsPerLogit = 7;
constexpr int64_t kCrossEntropyBackwardFlopsPerLogit = 14;

absl::Status ValidateCrossEntropy(const AttrMap& attrs) {
  RETURN_IF_ERROR(attrs.GetInt("ignore_index", -100).status());
  // GCC 12 at -O3 wrongly reports a moved-out std::string as maybe uninitialized.
  const absl::StatusOr<std::string> reduction_or = attrs.GetString("reduction", "mean");
  if (!reduction_or.ok()) return reduction_or.status();
  const std::string& reduction = *reduction_or;
  if (reduction != "mean" && reduction != "none") {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'reduction' must be \"mean\" or \"none\", got \"{}\"", reduction));
  }
  return absl::OkStatus();
}

// The loss's type: a scalar for "mean", one value per label for "none". Always
// f32, so a loss over f16 logits is still accumulated in full precision.
TensorType LossType(const AttrMap& attrs, const TensorType& labels) {
  const bool mean = *attrs.GetString("reduction", "mean") == "mean";
  return TensorType{DType::kF32, mean ? Shape{} : labels.shape, Layout::kRowMajor};
}

absl::Status CheckLogitsAndLabels(const TensorType& logits, int logits_index,
                                  const TensorType& labels, int labels_index) {
  if (logits.rank() < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "input {} (logits) must have a class axis, got {}", logits_index, TypeToString(logits)));
  }
  RETURN_IF_ERROR(ExpectFloating(logits, logits_index, "logits"));
  RETURN_IF_ERROR(ExpectInteger(labels, labels_index, "labels"));
  const Shape rows(logits.shape.begin(), logits.shape.end() - 1);
  if (labels.shape != rows) {
    return absl::InvalidArgumentError(
        fmt::format("labels {} must have the shape of logits {} without its last (class) axis, {}",
                    TypeToString(labels), TypeToString(logits), ShapeToString(rows)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Types> InferCrossEntropy(const AttrMap& attrs, std::span<const TensorType> inputs) {
  RETURN_IF_ERROR(CheckLogitsAndLabels(inputs[0], 0, inputs[1], 1));
  return Types{LossType(attrs, inputs[1])};
}

absl::StatusOr<Types> InferCrossEntropyBackward(const AttrMap& attrs,
                                                std::span<const TensorType> inputs) {
  const TensorType& dloss = inputs[0];
  RETURN_IF_ERROR(CheckLogitsAndLabels(inputs[1], 1, inputs[2], 2));
  const TensorType loss = LossType(attrs, inputs[2]);
  if (!IsFloating(dloss.dtype) || dloss.shape != loss.shape) {
    return absl::InvalidArgumentError(
        fmt::format("input 0 (dloss) must be a floating tensor of the loss's shape {}, got {}",
                    ShapeToString(loss.shape), TypeToString(dloss)));
  }
  return Types{inputs[1]};
}

template <int64_t kFlopsPerLogit>
OpCost CrossEntropyCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                        std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  // The logits are input 0 of the forward and input 1 of the backward.
  const TensorType& logits = inputs.size() == 2 ? inputs[0] : inputs[1];
  cost.flops = Elements(logits) * kFlopsPerLogit;
  return cost;
}

OpDef MakeDef(OpKind kind, int inputs, bool differentiable, InferFn infer, CostFn cost) {
  OpDef def;
  def.kind = kind;
  def.op_class = OpClass::kLoss;
  def.min_inputs = inputs;
  def.max_inputs = inputs;
  def.differentiable = differentiable;
  def.validate = ValidateCrossEntropy;
  def.infer = infer;
  def.cost = cost;
  return def;
}

}  // namespace

void RegisterLossOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef(OpKind::kCrossEntropyLoss, 2, true, InferCrossEntropy,
                         CrossEntropyCost<kCrossEntropyFlopsPerLogit>));
  defs.push_back(MakeDef(OpKind::kCrossEntropyLossBackward, 3, false, InferCrossEntropyBackward,
                         CrossEntropyCost<kCrossEntropyBackwardFlopsPerLogit>));
}

}  // namespace spillway::ir::ops
