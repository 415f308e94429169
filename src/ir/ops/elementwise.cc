// Element-wise ops (activations, arithmetic, dropout, fill) and the two ops
// that autodiff adds to sum gradients: add_n at fan-out and reduce_sum for
// bias gradients and broadcast reductions.
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/ops/op_defs.h"
#include "ir/ops/op_util.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::ir::ops {
namespace {

// FLOPs per output element of the memory-bound ops. These ops are limited by
// bandwidth, not arithmetic, so the counts are estimates that only need the
// right order of magnitude; erf, tanh and exp are each counted as 4.
constexpr int64_t kReluFlopsPerElement = 1;          // max(x, 0)
constexpr int64_t kReluBackwardFlopsPerElement = 1;  // y > 0 ? dy : 0
// 0.5·x·(1 + erf(x/√2)): scale, erf, add, two products. The tanh form has a
// cubic inside the tanh instead, which costs about the same.
constexpr int64_t kGeluFlopsPerElement = 8;
// The derivative needs both the CDF term (erf) and the density term (exp),
// then combines them with dy.
constexpr int64_t kGeluBackwardFlopsPerElement = 14;
constexpr int64_t kSigmoidFlopsPerElement = 6;  // 1/(1 + exp(-x)): exp, add, divide
constexpr int64_t kTanhFlopsPerElement = 4;
// From the forward's output: dy·y·(1-y) and dy·(1-y²), three operations each.
constexpr int64_t kSigmoidBackwardFlopsPerElement = 3;
constexpr int64_t kTanhBackwardFlopsPerElement = 3;
constexpr int64_t kLeakyReluFlopsPerElement = 2;  // x > 0 ? x : alpha·x, and so for dy
// Two compares: min(max(x, min), max), and min < y < max choosing dy or 0.
constexpr int64_t kClipFlopsPerElement = 2;
// A counter-based generator (a few integer mixes, counted as 2), the compare
// with p and the scale by 1/(1-p).
constexpr int64_t kDropoutFlopsPerElement = 4;
constexpr int64_t kBinaryFlopsPerElement = 1;

using Types = std::vector<TensorType>;

absl::Status ValidateApproximate(const AttrMap& attrs) {
  // GCC 12 at -O3 wrongly reports a moved-out std::string as maybe uninitialized.
  const absl::StatusOr<std::string> approximate_or = attrs.GetString("approximate", "none");
  if (!approximate_or.ok()) return approximate_or.status();
  const std::string& approximate = *approximate_or;
  if (approximate != "none" && approximate != "tanh") {
    return absl::InvalidArgumentError(fmt::format(
        "attribute 'approximate' must be \"none\" or \"tanh\", got \"{}\"", approximate));
  }
  return absl::OkStatus();
}

// alpha, the slope below zero, defaults to 0.01 as in ONNX and PyTorch (the
// reference kernels repeat that default). Any finite slope is allowed.
absl::Status ValidateLeakyRelu(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(double alpha, attrs.GetFloat("alpha", 0.01));
  if (!std::isfinite(alpha)) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'alpha' must be finite, got {}", AttrValueToString(alpha)));
  }
  return absl::OkStatus();
}

// min and max default to -inf and +inf (no bound on that side), as in ONNX
// Clip. Infinite bounds are allowed; NaN and min > max are not.
absl::Status ValidateClip(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(double min, attrs.GetFloat("min", -std::numeric_limits<double>::infinity()));
  ASSIGN_OR_RETURN(double max, attrs.GetFloat("max", std::numeric_limits<double>::infinity()));
  if (std::isnan(min)) return absl::InvalidArgumentError("attribute 'min' must not be NaN");
  if (std::isnan(max)) return absl::InvalidArgumentError("attribute 'max' must not be NaN");
  if (min > max) {
    return absl::InvalidArgumentError(fmt::format("attribute 'min' must be <= 'max', got {} and {}",
                                                  AttrValueToString(min), AttrValueToString(max)));
  }
  return absl::OkStatus();
}

absl::Status ValidateDropout(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(double p, attrs.GetFloat("p"));
  // Written so that NaN fails too. p = 1 would drop everything and divide by zero.
  if (!(p >= 0.0 && p < 1.0)) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'p' must be in [0, 1), got {}", AttrValueToString(p)));
  }
  // The seed makes the mask replayable; without it recomputation could not be exact.
  RETURN_IF_ERROR(attrs.GetInt("seed").status());
  return absl::OkStatus();
}

// relu, gelu, sigmoid, tanh, leaky_relu, clip, dropout: y has x's type.
absl::StatusOr<Types> InferUnaryFloating(const AttrMap& /*attrs*/,
                                         std::span<const TensorType> inputs) {
  RETURN_IF_ERROR(ExpectFloating(inputs[0], 0, "x"));
  return Types{inputs[0]};
}

// The activation gradients, (dy, y) or (dy, x): dx has dy's type.
absl::StatusOr<Types> InferUnaryBackward(const AttrMap& /*attrs*/,
                                         std::span<const TensorType> inputs) {
  RETURN_IF_ERROR(ExpectFloating(inputs[0], 0, "dy"));
  RETURN_IF_ERROR(ExpectSameShape(inputs[0], 0, inputs[1], 1));
  return Types{inputs[0]};
}

absl::StatusOr<Types> InferDropoutBackward(const AttrMap& /*attrs*/,
                                           std::span<const TensorType> inputs) {
  RETURN_IF_ERROR(ExpectFloating(inputs[0], 0, "dy"));
  return Types{inputs[0]};
}

// add, sub, mul, div: numpy broadcasting of two operands of one dtype.
absl::StatusOr<Types> InferBroadcastBinary(const AttrMap& /*attrs*/,
                                           std::span<const TensorType> inputs) {
  const TensorType& a = inputs[0];
  const TensorType& b = inputs[1];
  if (a.dtype != b.dtype) {
    return absl::InvalidArgumentError(
        fmt::format("inputs 0 (a) and 1 (b) must have one dtype, got {} and {}", TypeToString(a),
                    TypeToString(b)));
  }
  if (a.dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        fmt::format("inputs must be numeric, got {} and {}", TypeToString(a), TypeToString(b)));
  }
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a.shape, b.shape));
  const int64_t rank = static_cast<int64_t>(shape.size());
  return Types{TensorType{a.dtype, std::move(shape), OutputLayout(inputs, rank)}};
}

// div is floating point only: integer division would need a rounding rule and
// a division-by-zero error, and the importer folds integer shape arithmetic.
absl::StatusOr<Types> InferDiv(const AttrMap& attrs, std::span<const TensorType> inputs) {
  RETURN_IF_ERROR(ExpectFloating(inputs[0], 0, "a"));
  return InferBroadcastBinary(attrs, inputs);
}

absl::Status ValidateFill(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(IntList shape, attrs.GetInts("shape"));
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          fmt::format("attribute 'shape' entries must be >= 0, got {}", AttrValueToString(shape)));
    }
  }
  ASSIGN_OR_RETURN(double value, attrs.GetFloat("value"));
  // GCC 12 at -O3 wrongly reports a moved-out std::string as maybe uninitialized.
  const absl::StatusOr<std::string> dtype_name_or = attrs.GetString("dtype", "f32");
  if (!dtype_name_or.ok()) return dtype_name_or.status();
  const std::string& dtype_name = *dtype_name_or;
  std::optional<DType> dtype = ParseDType(dtype_name);
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'dtype' names no dtype: \"{}\"", dtype_name));
  }
  // The value is stored as a double; an integer tensor must get a value it can hold exactly.
  if (!IsFloating(*dtype)) {
    const bool integral = std::isfinite(value) && value == std::trunc(value);
    const bool fits = *dtype != DType::kBool || value == 0.0 || value == 1.0;
    if (!integral || !fits) {
      return absl::InvalidArgumentError(fmt::format("attribute 'value' {} is not a valid {} value",
                                                    AttrValueToString(value), dtype_name));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Types> InferFill(const AttrMap& attrs, std::span<const TensorType> /*inputs*/) {
  const std::optional<DType> dtype = ParseDType(*attrs.GetString("dtype", "f32"));
  SPILLWAY_CHECK(dtype.has_value(), "fill's dtype passed validation");
  return Types{TensorType{*dtype, attrs.Ints("shape"), Layout::kRowMajor}};
}

absl::StatusOr<Types> InferAddN(const AttrMap& /*attrs*/, std::span<const TensorType> inputs) {
  for (size_t i = 1; i < inputs.size(); ++i) {
    RETURN_IF_ERROR(ExpectSameShape(inputs[0], 0, inputs[i], static_cast<int>(i)));
  }
  TensorType sum = inputs[0];
  sum.layout = OutputLayout(inputs, sum.rank());
  return Types{std::move(sum)};
}

OpCost AddNCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                std::span<const TensorType> outputs) {
  return ElementwiseCost(inputs, outputs, static_cast<int64_t>(inputs.size()) - 1);
}

absl::Status ValidateReduceSum(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(IntList axes, attrs.GetInts("axes"));
  // An empty list means "all axes" in ONNX and "no axes" in numpy; ask for an explicit list.
  if (axes.empty()) {
    return absl::InvalidArgumentError("attribute 'axes' must name at least one axis");
  }
  RETURN_IF_ERROR(attrs.GetBool("keepdims", false).status());
  return absl::OkStatus();
}

absl::StatusOr<Types> InferReduceSum(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  if (x.dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        fmt::format("input 0 (x) must be numeric, got {}", TypeToString(x)));
  }
  std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
  for (int64_t axis : attrs.Ints("axes")) {
    absl::StatusOr<int64_t> normalized = NormalizeAxis(axis, x.rank());
    if (!normalized.ok()) {
      return Annotate(normalized.status(), fmt::format("attribute 'axes' of {}", TypeToString(x)));
    }
    if (reduced[static_cast<size_t>(*normalized)]) {
      return absl::InvalidArgumentError(fmt::format("attribute 'axes' {} names axis {} twice",
                                                    AttrValueToString(attrs.Ints("axes")),
                                                    *normalized));
    }
    reduced[static_cast<size_t>(*normalized)] = true;
  }
  const bool keepdims = *attrs.GetBool("keepdims", false);
  Shape shape;
  for (size_t i = 0; i < reduced.size(); ++i) {
    if (!reduced[i]) {
      shape.push_back(x.shape[i]);
    } else if (keepdims) {
      shape.push_back(1);
    }
  }
  const int64_t rank = static_cast<int64_t>(shape.size());
  return Types{TensorType{x.dtype, std::move(shape), OutputLayout(inputs, rank)}};
}

// One add per input element.
OpCost ReduceSumCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                     std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]);
  return cost;
}

template <int64_t kFlopsPerElement>
OpCost PerElementCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                      std::span<const TensorType> outputs) {
  return ElementwiseCost(inputs, outputs, kFlopsPerElement);
}

}  // namespace

void RegisterElementwiseOps(std::vector<OpDef>& defs) {
  constexpr OpClass kElementwise = OpClass::kElementwise;
  defs.push_back(MakeDef(OpKind::kRelu, kElementwise, 1, 1, true, nullptr, InferUnaryFloating,
                         PerElementCost<kReluFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kReluBackward, kElementwise, 2, 2, false, nullptr,
                         InferUnaryBackward, PerElementCost<kReluBackwardFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kGelu, kElementwise, 1, 1, true, ValidateApproximate,
                         InferUnaryFloating, PerElementCost<kGeluFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kGeluBackward, kElementwise, 2, 2, false, ValidateApproximate,
                         InferUnaryBackward, PerElementCost<kGeluBackwardFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kSigmoid, kElementwise, 1, 1, true, nullptr, InferUnaryFloating,
                         PerElementCost<kSigmoidFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kSigmoidBackward, kElementwise, 2, 2, false, nullptr,
                         InferUnaryBackward, PerElementCost<kSigmoidBackwardFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kTanh, kElementwise, 1, 1, true, nullptr, InferUnaryFloating,
                         PerElementCost<kTanhFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kTanhBackward, kElementwise, 2, 2, false, nullptr,
                         InferUnaryBackward, PerElementCost<kTanhBackwardFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kLeakyRelu, kElementwise, 1, 1, true, ValidateLeakyRelu,
                         InferUnaryFloating, PerElementCost<kLeakyReluFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kLeakyReluBackward, kElementwise, 2, 2, false, ValidateLeakyRelu,
                         InferUnaryBackward, PerElementCost<kLeakyReluFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kClip, kElementwise, 1, 1, true, ValidateClip, InferUnaryFloating,
                         PerElementCost<kClipFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kClipBackward, kElementwise, 2, 2, false, ValidateClip,
                         InferUnaryBackward, PerElementCost<kClipFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kAdd, kElementwise, 2, 2, true, nullptr, InferBroadcastBinary,
                         PerElementCost<kBinaryFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kSub, kElementwise, 2, 2, true, nullptr, InferBroadcastBinary,
                         PerElementCost<kBinaryFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kMul, kElementwise, 2, 2, true, nullptr, InferBroadcastBinary,
                         PerElementCost<kBinaryFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kDiv, kElementwise, 2, 2, true, nullptr, InferDiv,
                         PerElementCost<kBinaryFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kDropout, kElementwise, 1, 1, true, ValidateDropout,
                         InferUnaryFloating, PerElementCost<kDropoutFlopsPerElement>));
  defs.push_back(MakeDef(OpKind::kDropoutBackward, kElementwise, 1, 1, false, ValidateDropout,
                         InferDropoutBackward, PerElementCost<kDropoutFlopsPerElement>));
  // fill writes its output and reads nothing: the default bytes-only cost.
  defs.push_back(
      MakeDef(OpKind::kFill, kElementwise, 0, 0, false, ValidateFill, InferFill, nullptr));
  defs.push_back(MakeDef(OpKind::kAddN, kElementwise, 1, -1, false, nullptr, InferAddN, AddNCost));
  defs.push_back(MakeDef(OpKind::kReduceSum, OpClass::kReduction, 1, 1, false, ValidateReduceSum,
                         InferReduceSum, ReduceSumCost));
  for (OpDef& def : defs) {
    switch (def.kind) {
      case OpKind::kRelu:
      case OpKind::kReluBackward:
      case OpKind::kGelu:
      case OpKind::kGeluBackward:
      case OpKind::kSigmoid:
      case OpKind::kSigmoidBackward:
      case OpKind::kTanh:
      case OpKind::kTanhBackward:
      case OpKind::kLeakyRelu:
      case OpKind::kLeakyReluBackward:
      case OpKind::kClip:
      case OpKind::kClipBackward:
      case OpKind::kAdd:
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv:
      case OpKind::kDropout:
      case OpKind::kDropoutBackward:
      case OpKind::kAddN:
        def.may_overwrite_inputs = true;
        break;
      default:
        break;
    }
  }
}

}  // namespace spillway::ir::ops
