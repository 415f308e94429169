// conv2d and its two backward ops. Activations are NHWC, weights OHWI
// ([out_channels, kernel_h, kernel_w, in_channels/groups]); see docs/ops.md.
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

// The attributes conv2d and both backward ops share.
struct ConvAttrs {
  IntList strides;    // [h, w]
  IntList pads;       // [top, left, bottom, right]
  IntList dilations;  // [h, w]
  int64_t groups = 1;
};

absl::StatusOr<ConvAttrs> ParseConvAttrs(const AttrMap& attrs) {
  ConvAttrs conv;
  ASSIGN_OR_RETURN(conv.strides, GetSizedInts(attrs, "strides", 2, {1, 1}, 1));
  ASSIGN_OR_RETURN(conv.pads, GetSizedInts(attrs, "pads", 4, {0, 0, 0, 0}, 0));
  ASSIGN_OR_RETURN(conv.dilations, GetSizedInts(attrs, "dilations", 2, {1, 1}, 1));
  ASSIGN_OR_RETURN(conv.groups, attrs.GetInt("groups", 1));
  if (conv.groups < 1) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'groups' must be >= 1, got {}", conv.groups));
  }
  return conv;
}

absl::Status ValidateConv2d(const AttrMap& attrs) { return ParseConvAttrs(attrs).status(); }

absl::Status ValidateConv2dBackwardData(const AttrMap& attrs) {
  RETURN_IF_ERROR(ParseConvAttrs(attrs).status());
  return GetRequiredSizedInts(attrs, "input_shape", 4, 1).status();
}

absl::Status ValidateConv2dBackwardWeight(const AttrMap& attrs) {
  RETURN_IF_ERROR(ParseConvAttrs(attrs).status());
  return GetRequiredSizedInts(attrs, "kernel", 2, 1).status();
}

absl::Status ExpectSameDType(const TensorType& type, int index, std::string_view role,
                             const TensorType& reference) {
  if (type.dtype == reference.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must be {} like input 0, got {}",
                                                index, role, DTypeName(reference.dtype),
                                                TypeToString(type)));
}

// The forward output [N,OH,OW,O] for an input [N,H,W,C] and a weight shape
// [O,KH,KW,C/groups]; checks every relation between the two. `what` names the
// two tensors for messages ("x f32[...] nhwc, w f32[...]").
absl::StatusOr<Shape> ForwardOutputShape(const ConvAttrs& conv, const Shape& input,
                                         const Shape& weight, std::string_view what) {
  const int64_t channels = input[3];
  const int64_t out_channels = weight[0];
  if (out_channels < 1 || weight[1] < 1 || weight[2] < 1 || weight[3] < 1) {
    return absl::InvalidArgumentError(fmt::format("weight dimensions must all be >= 1 ({})", what));
  }
  if (channels != weight[3] * conv.groups) {
    return absl::InvalidArgumentError(
        fmt::format("input channels {} do not match weight's in_channels*groups {} ({})", channels,
                    weight[3] * conv.groups, what));
  }
  if (out_channels % conv.groups != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "output channels {} are not divisible by groups {} ({})", out_channels, conv.groups, what));
  }
  ASSIGN_OR_RETURN(int64_t out_height,
                   WindowOutputSize(input[1], weight[1], conv.strides[0], conv.pads[0],
                                    conv.pads[2], conv.dilations[0], "height"));
  ASSIGN_OR_RETURN(int64_t out_width,
                   WindowOutputSize(input[2], weight[2], conv.strides[1], conv.pads[1],
                                    conv.pads[3], conv.dilations[1], "width"));
  return Shape{input[0], out_height, out_width, out_channels};
}

absl::StatusOr<std::vector<TensorType>> InferConv2d(const AttrMap& attrs,
                                                    std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  const TensorType& w = inputs[1];
  RETURN_IF_ERROR(ExpectRank(x, 4, 0, "x"));
  RETURN_IF_ERROR(ExpectFloating(x, 0, "x"));
  RETURN_IF_ERROR(ExpectRank(w, 4, 1, "w"));
  RETURN_IF_ERROR(ExpectSameDType(w, 1, "w", x));
  ASSIGN_OR_RETURN(ConvAttrs conv, ParseConvAttrs(attrs));
  const std::string what = fmt::format("x {}, w {}", TypeToString(x), TypeToString(w));
  ASSIGN_OR_RETURN(Shape y_shape, ForwardOutputShape(conv, x.shape, w.shape, what));
  if (inputs.size() == 3) {
    const TensorType& b = inputs[2];
    RETURN_IF_ERROR(ExpectSameDType(b, 2, "b", x));
    if (b.shape != Shape{w.shape[0]}) {
      return absl::InvalidArgumentError(
          fmt::format("input 2 (b) must be [{}] to match the weight's out_channels, got {} ({})",
                      w.shape[0], TypeToString(b), what));
    }
  }
  return std::vector<TensorType>{{x.dtype, y_shape, Layout::kNHWC}};
}

// dx [N,H,W,C] from dy [N,OH,OW,O] and w [O,KH,KW,C/groups]: the forward's
// output for `input_shape` must be dy's shape, or the gradient belongs to
// another convolution. An optional third input, acc, of dx's type, is added
// to the result: autodiff sums the gradients a value gets from several
// consumers that way, and the kernel may write dx over acc's buffer.
absl::StatusOr<std::vector<TensorType>> InferConv2dBackwardData(
    const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  const TensorType& w = inputs[1];
  RETURN_IF_ERROR(ExpectRank(dy, 4, 0, "dy"));
  RETURN_IF_ERROR(ExpectFloating(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectRank(w, 4, 1, "w"));
  RETURN_IF_ERROR(ExpectSameDType(w, 1, "w", dy));
  ASSIGN_OR_RETURN(ConvAttrs conv, ParseConvAttrs(attrs));
  const Shape input_shape = attrs.Ints("input_shape");
  const std::string what = fmt::format("input_shape {}, dy {}, w {}", ShapeToString(input_shape),
                                       TypeToString(dy), TypeToString(w));
  ASSIGN_OR_RETURN(Shape y_shape, ForwardOutputShape(conv, input_shape, w.shape, what));
  if (y_shape != dy.shape) {
    return absl::InvalidArgumentError(fmt::format(
        "dy must have the forward output shape {}, got {}", ShapeToString(y_shape), what));
  }
  const TensorType dx{dy.dtype, input_shape, Layout::kNHWC};
  if (inputs.size() == 3 && inputs[2] != dx) {
    return absl::InvalidArgumentError(fmt::format("input 2 (acc) must be dx's type {}, got {}",
                                                  TypeToString(dx), TypeToString(inputs[2])));
  }
  return std::vector<TensorType>{dx};
}

// dw [O,KH,KW,C/groups] from dy [N,OH,OW,O] and x [N,H,W,C].
absl::StatusOr<std::vector<TensorType>> InferConv2dBackwardWeight(
    const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  const TensorType& x = inputs[1];
  RETURN_IF_ERROR(ExpectRank(dy, 4, 0, "dy"));
  RETURN_IF_ERROR(ExpectFloating(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectRank(x, 4, 1, "x"));
  RETURN_IF_ERROR(ExpectSameDType(x, 1, "x", dy));
  ASSIGN_OR_RETURN(ConvAttrs conv, ParseConvAttrs(attrs));
  const IntList kernel = attrs.Ints("kernel");
  const std::string what = fmt::format("kernel {}, dy {}, x {}", ShapeToString(kernel),
                                       TypeToString(dy), TypeToString(x));
  if (x.shape[3] % conv.groups != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "input channels {} are not divisible by groups {} ({})", x.shape[3], conv.groups, what));
  }
  const Shape dw_shape{dy.shape[3], kernel[0], kernel[1], x.shape[3] / conv.groups};
  ASSIGN_OR_RETURN(Shape y_shape, ForwardOutputShape(conv, x.shape, dw_shape, what));
  if (y_shape != dy.shape) {
    return absl::InvalidArgumentError(fmt::format(
        "dy must have the forward output shape {}, got {}", ShapeToString(y_shape), what));
  }
  return std::vector<TensorType>{{x.dtype, dw_shape, Layout::kRowMajor}};
}

// Every output element of the forward is a dot product over KH*KW*(C/groups)
// inputs; both backward ops do the same products in another order, so all
// three count N*OH*OW*O*KH*KW*(C/groups) MACs.
int64_t ConvMacs(const Shape& y, const Shape& w) {
  return y[0] * y[1] * y[2] * y[3] * w[1] * w[2] * w[3];
}

OpCost Conv2dCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                  std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.macs = ConvMacs(outputs[0].shape, inputs[1].shape);
  cost.flops = 2 * cost.macs;
  if (inputs.size() == 3) cost.flops += Elements(outputs[0]);  // one bias add per output
  return cost;
}

OpCost Conv2dBackwardDataCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                              std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.macs = ConvMacs(inputs[0].shape, inputs[1].shape);  // dy is the forward's y
  cost.flops = 2 * cost.macs;
  if (inputs.size() == 3) cost.flops += Elements(outputs[0]);  // acc + product
  return cost;
}

OpCost Conv2dBackwardWeightCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                                std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.macs = ConvMacs(inputs[0].shape, outputs[0].shape);  // dw has the weight's shape
  cost.flops = 2 * cost.macs;
  return cost;
}

}  // namespace

void RegisterConvolutionOps(std::vector<OpDef>& defs) {
  defs.push_back({.kind = OpKind::kConv2d,
                  .op_class = OpClass::kConvolution,
                  .min_inputs = 2,
                  .max_inputs = 3,
                  .output_names = {},
                  .differentiable = true,
                  .in_place = {},
                  .validate = ValidateConv2d,
                  .infer = InferConv2d,
                  .cost = Conv2dCost});
  defs.push_back({.kind = OpKind::kConv2dBackwardData,
                  .op_class = OpClass::kConvolution,
                  .min_inputs = 2,
                  .max_inputs = 3,
                  .output_names = {},
                  .differentiable = false,
                  .in_place = {},
                  // dx over acc: a kernel reads acc only to add it to the
                  // finished product, never dy or w.
                  .may_overwrite_inputs = true,
                  .overwritable_input = 2,
                  .validate = ValidateConv2dBackwardData,
                  .infer = InferConv2dBackwardData,
                  .cost = Conv2dBackwardDataCost});
  defs.push_back({.kind = OpKind::kConv2dBackwardWeight,
                  .op_class = OpClass::kConvolution,
                  .min_inputs = 2,
                  .max_inputs = 2,
                  .output_names = {},
                  .differentiable = false,
                  .in_place = {},
                  .validate = ValidateConv2dBackwardWeight,
                  .infer = InferConv2dBackwardWeight,
                  .cost = Conv2dBackwardWeightCost});
}

}  // namespace spillway::ir::ops
