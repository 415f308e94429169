// batch_norm, layer_norm, softmax and log_softmax with their backward ops; see
// docs/ops.md. All are memory-bound: their cost is the bytes of their tensors
// plus a small, fixed number of FLOPs per element.
#include <cmath>
#include <span>
#include <vector>

#include "fmt/format.h"
#include "ir/attributes.h"
#include "ir/op_registry.h"
#include "ir/ops/op_defs.h"
#include "ir/ops/op_util.h"
#include "ir/types.h"
#include "support/status_macros.h"

namespace spillway::ir::ops {
namespace {

// FLOPs per element of x, counted as a straightforward kernel does them.
// Forward normalization in training mode (and layer norm, which always
// computes its statistics): sum for the mean (1), centre, square and sum for
// the variance (3), then centre, scale by the inverse deviation, scale by gamma
// and add beta (4).
constexpr int64_t kNormalizeWithStatisticsFlops = 8;
// Batch norm in inference mode folds mean, variance, gamma and beta into one
// scale and shift per channel: one multiply-add per element.
constexpr int64_t kNormalizeInferenceFlops = 2;
// Backward with statistics: recompute x_hat (2), accumulate dbeta (1) and
// dgamma (2), then dx = gamma*inv_std*(dy - mean(dy) - x_hat*mean(dy*x_hat)) (5).
constexpr int64_t kNormalizeBackwardFlops = 10;
// Backward of inference batch norm: dx = dy*scale (1), dbeta (1), dgamma (3:
// centre, scale, multiply-accumulate).
constexpr int64_t kNormalizeInferenceBackwardFlops = 5;
// Softmax: max, subtract, exp, sum, divide.
constexpr int64_t kSoftmaxFlops = 5;
// Log-softmax: max, subtract, exp, sum, subtract the log of the sum.
constexpr int64_t kLogSoftmaxFlops = 5;
// Softmax backward dx = y*(dy - sum(dy*y)): multiply, sum, subtract, multiply.
// Log-softmax backward dx = dy - exp(y)*sum(dy): sum, exp, multiply, subtract.
constexpr int64_t kSoftmaxBackwardFlops = 4;

// The type statistics (means, inverse deviations) are stored in: f32 whatever
// the activation's precision, as cuDNN's batch norm does for f16 data, since
// reduced-precision statistics lose the accuracy normalization relies on.
constexpr DType kStatisticsDType = DType::kF32;

absl::Status ExpectSameDType(const TensorType& type, int index, std::string_view role,
                             const TensorType& reference, int reference_index) {
  if (type.dtype == reference.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must be {} like input {}, got {}",
                                                index, role, DTypeName(reference.dtype),
                                                reference_index, TypeToString(type)));
}

// A floating vector of `size` entries: gamma, beta and per-channel statistics.
absl::Status ExpectVector(const TensorType& type, int64_t size, int index, std::string_view role,
                          const TensorType& x) {
  RETURN_IF_ERROR(ExpectFloating(type, index, role));
  if (type.shape == Shape{size}) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must be [{}] to match x {}, got {}",
                                                index, role, size, TypeToString(x),
                                                TypeToString(type)));
}

// The statistics of layer norm: one per row, shape x's without the last axis.
absl::Status ExpectRowStatistics(const TensorType& type, int index, std::string_view role,
                                 const TensorType& x) {
  RETURN_IF_ERROR(ExpectFloating(type, index, role));
  const Shape rows(x.shape.begin(), x.shape.end() - 1);
  if (type.shape == rows) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must be {} to match x {}, got {}",
                                                index, role, ShapeToString(rows), TypeToString(x),
                                                TypeToString(type)));
}

// The bytes of every tensor, and FLOPs for each element of the first output
// (the statistics outputs are a vanishing fraction of the work).
OpCost NormalizationCost(std::span<const TensorType> inputs, std::span<const TensorType> outputs,
                         int64_t flops_per_element) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(outputs[0]) * flops_per_element;
  return cost;
}

absl::Status ExpectPositiveEpsilon(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(double epsilon, attrs.GetFloat("epsilon", 1e-5));
  if (!(epsilon > 0.0) || !std::isfinite(epsilon)) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'epsilon' must be a positive number, got {}", epsilon));
  }
  return absl::OkStatus();
}

// x [...,C] with the channel axis last: at least a batch axis and a channel
// axis, so that there is something to average over.
absl::Status ExpectChannelsLast(const TensorType& x, int index, std::string_view role) {
  RETURN_IF_ERROR(ExpectFloating(x, index, role));
  if (x.rank() >= 2) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "input {} ({}) must have rank >= 2 ([...,C]), got {}", index, role, TypeToString(x)));
}

// ---- batch_norm ----

absl::Status ValidateBatchNorm(const AttrMap& attrs) {
  RETURN_IF_ERROR(attrs.GetBool("training", true).status());
  ASSIGN_OR_RETURN(double momentum, attrs.GetFloat("momentum", 0.1));
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'momentum' must be in [0, 1], got {}", momentum));
  }
  return ExpectPositiveEpsilon(attrs);
}

bool IsTraining(const AttrMap& attrs) {
  absl::StatusOr<bool> training = attrs.GetBool("training", true);
  return training.ok() && *training;
}

absl::StatusOr<std::vector<TensorType>> InferBatchNorm(const AttrMap& attrs,
                                                       std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  RETURN_IF_ERROR(ExpectChannelsLast(x, 0, "x"));
  const int64_t channels = x.shape.back();
  RETURN_IF_ERROR(ExpectVector(inputs[1], channels, 1, "gamma", x));
  RETURN_IF_ERROR(ExpectVector(inputs[2], channels, 2, "beta", x));
  RETURN_IF_ERROR(ExpectVector(inputs[3], channels, 3, "running_mean", x));
  RETURN_IF_ERROR(ExpectVector(inputs[4], channels, 4, "running_var", x));
  RETURN_IF_ERROR(ExpectSameDType(inputs[2], 2, "beta", inputs[1], 1));
  if (!IsTraining(attrs)) return std::vector<TensorType>{x};
  // The running statistics are updated in place, so they keep their input types.
  const TensorType statistic{kStatisticsDType, {channels}, Layout::kRowMajor};
  return std::vector<TensorType>{x, statistic, statistic, inputs[3], inputs[4]};
}

OpCost BatchNormCost(const AttrMap& attrs, std::span<const TensorType> inputs,
                     std::span<const TensorType> outputs) {
  return NormalizationCost(
      inputs, outputs,
      IsTraining(attrs) ? kNormalizeWithStatisticsFlops : kNormalizeInferenceFlops);
}

absl::Status ValidateBatchNormBackward(const AttrMap& attrs) {
  RETURN_IF_ERROR(attrs.GetBool("training", true).status());
  return ExpectPositiveEpsilon(attrs);
}

// dy, x, gamma, mean, inv_std (training) or running_var (inference).
absl::StatusOr<std::vector<TensorType>> InferBatchNormBackward(const AttrMap& attrs,
                                                               std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  const TensorType& x = inputs[1];
  RETURN_IF_ERROR(ExpectChannelsLast(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectSameShape(dy, 0, x, 1));
  const int64_t channels = x.shape.back();
  RETURN_IF_ERROR(ExpectVector(inputs[2], channels, 2, "gamma", x));
  const bool training = IsTraining(attrs);
  RETURN_IF_ERROR(
      ExpectVector(inputs[3], channels, 3, training ? "saved_mean" : "running_mean", x));
  RETURN_IF_ERROR(
      ExpectVector(inputs[4], channels, 4, training ? "saved_inv_std" : "running_var", x));
  return std::vector<TensorType>{x, inputs[2], inputs[2]};
}

OpCost BatchNormBackwardCost(const AttrMap& attrs, std::span<const TensorType> inputs,
                             std::span<const TensorType> outputs) {
  return NormalizationCost(
      inputs, outputs,
      IsTraining(attrs) ? kNormalizeBackwardFlops : kNormalizeInferenceBackwardFlops);
}

// ---- layer_norm ----

absl::Status ValidateLayerNorm(const AttrMap& attrs) { return ExpectPositiveEpsilon(attrs); }

absl::StatusOr<std::vector<TensorType>> InferLayerNorm(const AttrMap& /*attrs*/,
                                                       std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  RETURN_IF_ERROR(ExpectFloating(x, 0, "x"));
  if (x.rank() < 1) {
    return absl::InvalidArgumentError(
        fmt::format("input 0 (x) must have rank >= 1 ([...,D]), got {}", TypeToString(x)));
  }
  const int64_t features = x.shape.back();
  RETURN_IF_ERROR(ExpectVector(inputs[1], features, 1, "gamma", x));
  RETURN_IF_ERROR(ExpectVector(inputs[2], features, 2, "beta", x));
  RETURN_IF_ERROR(ExpectSameDType(inputs[2], 2, "beta", inputs[1], 1));
  const TensorType statistic{kStatisticsDType, Shape(x.shape.begin(), x.shape.end() - 1),
                             Layout::kRowMajor};
  return std::vector<TensorType>{x, statistic, statistic};
}

OpCost LayerNormCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                     std::span<const TensorType> outputs) {
  return NormalizationCost(inputs, outputs, kNormalizeWithStatisticsFlops);
}

// dy, x, gamma, mean, rstd.
absl::StatusOr<std::vector<TensorType>> InferLayerNormBackward(const AttrMap& /*attrs*/,
                                                               std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  const TensorType& x = inputs[1];
  RETURN_IF_ERROR(ExpectFloating(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectSameShape(dy, 0, x, 1));
  if (x.rank() < 1) {
    return absl::InvalidArgumentError(
        fmt::format("input 1 (x) must have rank >= 1 ([...,D]), got {}", TypeToString(x)));
  }
  RETURN_IF_ERROR(ExpectVector(inputs[2], x.shape.back(), 2, "gamma", x));
  RETURN_IF_ERROR(ExpectRowStatistics(inputs[3], 3, "mean", x));
  RETURN_IF_ERROR(ExpectRowStatistics(inputs[4], 4, "rstd", x));
  return std::vector<TensorType>{x, inputs[2], inputs[2]};
}

OpCost LayerNormBackwardCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                             std::span<const TensorType> outputs) {
  return NormalizationCost(inputs, outputs, kNormalizeBackwardFlops);
}

// ---- softmax, log_softmax ----

absl::Status ValidateSoftmax(const AttrMap& attrs) {
  RETURN_IF_ERROR(attrs.GetInt("axis", -1).status());
  return attrs.GetBool("causal", false).status();
}

absl::Status ValidateLogSoftmax(const AttrMap& attrs) {
  RETURN_IF_ERROR(attrs.GetInt("axis", -1).status());
  if (attrs.Has("causal")) {
    return absl::InvalidArgumentError(
        "attribute 'causal' belongs to softmax only; mask before log_softmax");
  }
  return absl::OkStatus();
}

absl::Status ValidateSoftmaxBackward(const AttrMap& attrs) {
  return attrs.GetInt("axis", -1).status();
}

absl::StatusOr<std::vector<TensorType>> InferSoftmax(const AttrMap& attrs,
                                                     std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  RETURN_IF_ERROR(ExpectFloating(x, 0, "x"));
  ASSIGN_OR_RETURN(int64_t axis, attrs.GetInt("axis", -1));
  absl::StatusOr<int64_t> normalized = NormalizeAxis(axis, x.rank());
  if (!normalized.ok()) return Annotate(normalized.status(), fmt::format("x {}", TypeToString(x)));
  ASSIGN_OR_RETURN(bool causal, attrs.GetBool("causal", false));
  // The causal mask is over the last two axes [Q,K], and softmax runs over K.
  if (causal && (x.rank() < 2 || *normalized != x.rank() - 1)) {
    return absl::InvalidArgumentError(fmt::format(
        "causal softmax needs x of rank >= 2 ([...,Q,K]) and axis -1, got x {}, axis {}",
        TypeToString(x), axis));
  }
  return std::vector<TensorType>{x};
}

// dy and y (the forward's output) of the same type.
absl::StatusOr<std::vector<TensorType>> InferSoftmaxBackward(const AttrMap& attrs,
                                                             std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  RETURN_IF_ERROR(ExpectFloating(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectSameShape(dy, 0, inputs[1], 1));
  ASSIGN_OR_RETURN(int64_t axis, attrs.GetInt("axis", -1));
  absl::StatusOr<int64_t> normalized = NormalizeAxis(axis, dy.rank());
  if (!normalized.ok()) {
    return Annotate(normalized.status(), fmt::format("dy {}", TypeToString(dy)));
  }
  return std::vector<TensorType>{dy};
}

OpCost SoftmaxCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                   std::span<const TensorType> outputs) {
  return ElementwiseCost(inputs, outputs, kSoftmaxFlops);
}

OpCost LogSoftmaxCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                      std::span<const TensorType> outputs) {
  return ElementwiseCost(inputs, outputs, kLogSoftmaxFlops);
}

OpCost SoftmaxBackwardCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                           std::span<const TensorType> outputs) {
  return ElementwiseCost(inputs, outputs, kSoftmaxBackwardFlops);
}

}  // namespace

void RegisterNormalizationOps(std::vector<OpDef>& defs) {
  defs.push_back(
      {.kind = OpKind::kBatchNorm,
       .op_class = OpClass::kNormalization,
       .min_inputs = 5,
       .max_inputs = 5,
       .output_names = {"", "saved_mean", "saved_inv_std", "running_mean", "running_var"},
       .differentiable = true,
       .in_place = {{3, 3}, {4, 4}},
       .validate = ValidateBatchNorm,
       .infer = InferBatchNorm,
       .cost = BatchNormCost});
  defs.push_back({.kind = OpKind::kBatchNormBackward,
                  .op_class = OpClass::kNormalization,
                  .min_inputs = 5,
                  .max_inputs = 5,
                  .output_names = {"", "dgamma", "dbeta"},
                  .differentiable = false,
                  .in_place = {},
                  // dx over dy or x: a kernel reduces a channel's dy and x
                  // (dgamma and dbeta) before it writes that channel's dx,
                  // element by element. (Layer norm's kernels write dx
                  // first and reduce dy after, so its backward may not.)
                  .may_overwrite_inputs = true,
                  .validate = ValidateBatchNormBackward,
                  .infer = InferBatchNormBackward,
                  .cost = BatchNormBackwardCost});
  defs.push_back({.kind = OpKind::kLayerNorm,
                  .op_class = OpClass::kNormalization,
                  .min_inputs = 3,
                  .max_inputs = 3,
                  .output_names = {"", "mean", "rstd"},
                  .differentiable = true,
                  .in_place = {},
                  .validate = ValidateLayerNorm,
                  .infer = InferLayerNorm,
                  .cost = LayerNormCost});
  defs.push_back({.kind = OpKind::kLayerNormBackward,
                  .op_class = OpClass::kNormalization,
                  .min_inputs = 5,
                  .max_inputs = 5,
                  .output_names = {"", "dgamma", "dbeta"},
                  .differentiable = false,
                  .in_place = {},
                  .validate = ValidateLayerNorm,
                  .infer = InferLayerNormBackward,
                  .cost = LayerNormBackwardCost});
  defs.push_back({.kind = OpKind::kSoftmax,
                  .op_class = OpClass::kNormalization,
                  .min_inputs = 1,
                  .max_inputs = 1,
                  .output_names = {},
                  .differentiable = true,
                  .in_place = {},
                  .validate = ValidateSoftmax,
                  .infer = InferSoftmax,
                  .cost = SoftmaxCost});
  defs.push_back({.kind = OpKind::kSoftmaxBackward,
                  .op_class = OpClass::kNormalization,
                  .min_inputs = 2,
                  .max_inputs = 2,
                  .output_names = {},
                  .differentiable = false,
                  .in_place = {},
                  .validate = ValidateSoftmaxBackward,
                  .infer = InferSoftmaxBackward,
                  .cost = SoftmaxBackwardCost});
  defs.push_back({.kind = OpKind::kLogSoftmax,
                  .op_class = OpClass::kNormalization,
                  .min_inputs = 1,
                  .max_inputs = 1,
                  .output_names = {},
                  .differentiable = true,
                  .in_place = {},
                  .validate = ValidateLogSoftmax,
                  .infer = InferSoftmax,
                  .cost = LogSoftmaxCost});
  defs.push_back({.kind = OpKind::kLogSoftmaxBackward,
                  .op_class = OpClass::kNormalization,
                  .min_inputs = 2,
                  .max_inputs = 2,
                  .output_names = {},
                  .differentiable = false,
                  .in_place = {},
                  .validate = ValidateSoftmaxBackward,
                  .infer = InferSoftmaxBackward,
                  .cost = SoftmaxBackwardCost});
}

}  // namespace spillway::ir::ops
