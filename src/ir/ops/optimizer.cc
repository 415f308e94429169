// Optimizer updates. Each writes the parameter and its optimizer state in
// place, so liveness counts one buffer per tensor across the step.
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/ops/op_defs.h"
#include "ir/ops/op_util.h"
#include "support/status_macros.h"

namespace spillway::ir::ops {
namespace {

using Types = std::vector<TensorType>;

// Adam per element: the moment updates (3 for m, 4 for v), bias correction of
// both (2), sqrt (counted as 4), epsilon (1), the division (1), the scaled
// subtraction (2) and weight decay (2).
constexpr int64_t kAdamFlopsPerElement = 19;

// A float attribute that must be finite and at least `min_value` (and below
// `max_value` when given: betas and momentum of 1 or more never converge).
absl::StatusOr<double> GetBoundedFloat(const AttrMap& attrs, std::string_view name,
                                       std::optional<double> fallback, double min_value,
                                       std::optional<double> max_value = std::nullopt) {
  absl::StatusOr<double> value =
      fallback.has_value() ? attrs.GetFloat(name, *fallback) : attrs.GetFloat(name);
  if (!value.ok()) return value.status();
  const bool in_range = std::isfinite(*value) && *value >= min_value &&
                        (!max_value.has_value() || *value < *max_value);
  if (!in_range) {
    std::string range = max_value.has_value()
                            ? fmt::format("in [{}, {})", AttrValueToString(min_value),
                                          AttrValueToString(*max_value))
                            : fmt::format(">= {}", AttrValueToString(min_value));
    return absl::InvalidArgumentError(
        fmt::format("attribute '{}' must be {}, got {}", name, range, AttrValueToString(*value)));
  }
  return value;
}

// The parameter must be floating and every per-element state tensor of its type.
absl::Status CheckParamAndState(std::span<const TensorType> inputs, size_t state_count) {
  RETURN_IF_ERROR(ExpectFloating(inputs[0], 0, "param"));
  for (size_t i = 1; i <= state_count; ++i) {
    RETURN_IF_ERROR(ExpectSameShape(inputs[0], 0, inputs[i], static_cast<int>(i)));
  }
  return absl::OkStatus();
}

// ---- sgd_update ----

absl::Status ValidateSgd(const AttrMap& attrs) {
  RETURN_IF_ERROR(GetBoundedFloat(attrs, "lr", std::nullopt, 0.0).status());
  ASSIGN_OR_RETURN(double momentum, GetBoundedFloat(attrs, "momentum", 0.0, 0.0, 1.0));
  RETURN_IF_ERROR(GetBoundedFloat(attrs, "weight_decay", 0.0, 0.0).status());
  ASSIGN_OR_RETURN(bool nesterov, attrs.GetBool("nesterov", false));
  if (nesterov && momentum == 0.0) {
    return absl::InvalidArgumentError("attribute 'nesterov' needs a nonzero 'momentum'");
  }
  return absl::OkStatus();
}

// Without momentum there is no buffer, so the update has one input and one
// output fewer; with it, the buffer is input 2 and output 1.
absl::StatusOr<Types> InferSgd(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const double momentum = *attrs.GetFloat("momentum", 0.0);
  const size_t expected_inputs = momentum == 0.0 ? 2 : 3;
  if (inputs.size() != expected_inputs) {
    return absl::InvalidArgumentError(
        momentum == 0.0
            ? std::string(
                  "momentum is 0, so there is no momentum_buf input: expects 2 inputs, got 3")
            : fmt::format("momentum {} needs a momentum_buf as input 2: expects 3 inputs, got 2",
                          AttrValueToString(momentum)));
  }
  RETURN_IF_ERROR(CheckParamAndState(inputs, expected_inputs - 1));
  if (expected_inputs == 2) return Types{inputs[0]};
  return Types{inputs[0], inputs[2]};
}

// Per element: the step lr·g and the subtraction (2), weight decay (2), the
// momentum buffer update (2) and Nesterov's look-ahead (2).
OpCost SgdCost(const AttrMap& attrs, std::span<const TensorType> inputs,
               std::span<const TensorType> outputs) {
  int64_t flops_per_element = 2;
  if (*attrs.GetFloat("weight_decay", 0.0) != 0.0) flops_per_element += 2;
  if (*attrs.GetFloat("momentum", 0.0) != 0.0) flops_per_element += 2;
  if (*attrs.GetBool("nesterov", false)) flops_per_element += 2;
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]) * flops_per_element;
  return cost;
}

// ---- adam_update ----

absl::Status ValidateAdam(const AttrMap& attrs) {
  RETURN_IF_ERROR(GetBoundedFloat(attrs, "lr", std::nullopt, 0.0).status());
  RETURN_IF_ERROR(GetBoundedFloat(attrs, "beta1", 0.9, 0.0, 1.0).status());
  RETURN_IF_ERROR(GetBoundedFloat(attrs, "beta2", 0.999, 0.0, 1.0).status());
  ASSIGN_OR_RETURN(double epsilon, GetBoundedFloat(attrs, "epsilon", 1e-8, 0.0));
  // epsilon keeps the denominator sqrt(v) + epsilon away from zero.
  if (epsilon == 0.0) {
    return absl::InvalidArgumentError("attribute 'epsilon' must be positive, got 0.0");
  }
  RETURN_IF_ERROR(GetBoundedFloat(attrs, "weight_decay", 0.0, 0.0).status());
  RETURN_IF_ERROR(attrs.GetBool("decoupled", true).status());
  return absl::OkStatus();
}

absl::StatusOr<Types> InferAdam(const AttrMap& /*attrs*/, std::span<const TensorType> inputs) {
  RETURN_IF_ERROR(CheckParamAndState(inputs, 3));
  const TensorType& step = inputs[4];
  if (step.dtype != DType::kI64 || step.rank() != 0) {
    return absl::InvalidArgumentError(
        fmt::format("input 4 (step) must be i64[], got {}", TypeToString(step)));
  }
  return Types{inputs[0], inputs[2], inputs[3]};
}

OpCost AdamCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]) * kAdamFlopsPerElement;
  return cost;
}

}  // namespace

void RegisterOptimizerOps(std::vector<OpDef>& defs) {
  OpDef sgd;
  sgd.kind = OpKind::kSgdUpdate;
  sgd.op_class = OpClass::kOptimizer;
  sgd.min_inputs = 2;
  sgd.max_inputs = 3;
  sgd.output_names = {"", "momentum_buf"};
  sgd.in_place = {{0, 0}, {1, 2}};
  sgd.validate = ValidateSgd;
  sgd.infer = InferSgd;
  sgd.cost = SgdCost;
  defs.push_back(std::move(sgd));

  OpDef adam;
  adam.kind = OpKind::kAdamUpdate;
  adam.op_class = OpClass::kOptimizer;
  adam.min_inputs = 5;
  adam.max_inputs = 5;
  adam.output_names = {"", "m", "v"};
  adam.in_place = {{0, 0}, {1, 2}, {2, 3}};
  adam.validate = ValidateAdam;
  adam.infer = InferAdam;
  adam.cost = AdamCost;
  defs.push_back(std::move(adam));
}

}  // namespace spillway::ir::ops
