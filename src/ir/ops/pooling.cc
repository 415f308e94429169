// Max, average and global average pooling, bilinear and nearest resize, and
// their backward ops, over NHWC activations; see docs/ops.md. All are
// memory-bound: their cost is the bytes of their tensors plus the FLOPs
// counted below.
#include <span>
#include <vector>

#include "fmt/format.h"
#include "ir/attributes.h"
#include "ir/op_registry.h"
#include "ir/ops/op_defs.h"
#include "ir/ops/op_util.h"
#include "ir/types.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::ir::ops {
namespace {

// Bilinear interpolation reads four taps per output element and weights them:
// 4 multiplies and 3 adds. Its backward scatters dy to the same four taps with
// 4 multiplies and 4 accumulating adds.
constexpr int64_t kBilinearFlops = 7;
constexpr int64_t kBilinearBackwardFlops = 8;

// The attributes max_pool and avg_pool share, and their backward ops.
struct PoolAttrs {
  IntList kernel;   // [h, w]
  IntList strides;  // [h, w]
  IntList pads;     // [top, left, bottom, right]
};

absl::StatusOr<PoolAttrs> ParsePoolAttrs(const AttrMap& attrs) {
  PoolAttrs pool;
  ASSIGN_OR_RETURN(pool.kernel, GetRequiredSizedInts(attrs, "kernel", 2, 1));
  ASSIGN_OR_RETURN(pool.strides, GetSizedInts(attrs, "strides", 2, pool.kernel, 1));
  ASSIGN_OR_RETURN(pool.pads, GetSizedInts(attrs, "pads", 4, {0, 0, 0, 0}, 0));
  // A pad as wide as the kernel would make the first or last window all
  // padding: a max over nothing, or an average dividing by zero.
  for (int i = 0; i < 4; ++i) {
    if (pool.pads[i] >= pool.kernel[i % 2]) {
      return absl::InvalidArgumentError(
          fmt::format("attribute 'pads' {} must be smaller than the kernel {} on every side",
                      AttrValueToString(pool.pads), AttrValueToString(pool.kernel)));
    }
  }
  return pool;
}

PoolAttrs ValidPoolAttrs(const AttrMap& attrs) {
  absl::StatusOr<PoolAttrs> pool = ParsePoolAttrs(attrs);
  SPILLWAY_CHECK(pool.ok(), "pooling attributes were validated");
  return *pool;
}

absl::Status ValidateMaxPool(const AttrMap& attrs) { return ParsePoolAttrs(attrs).status(); }

absl::Status ValidateAvgPool(const AttrMap& attrs) {
  RETURN_IF_ERROR(ParsePoolAttrs(attrs).status());
  return attrs.GetBool("count_include_pad", false).status();
}

absl::Status ValidateAvgPoolBackward(const AttrMap& attrs) {
  RETURN_IF_ERROR(ValidateAvgPool(attrs));
  return GetRequiredSizedInts(attrs, "input_shape", 4, 1).status();
}

absl::Status ValidateGlobalAvgPoolBackward(const AttrMap& attrs) {
  return GetRequiredSizedInts(attrs, "input_shape", 4, 1).status();
}

absl::Status ValidateResizeBilinear(const AttrMap& attrs) {
  RETURN_IF_ERROR(GetRequiredSizedInts(attrs, "size", 2, 1).status());
  return attrs.GetBool("align_corners", false).status();
}

absl::Status ValidateResizeBilinearBackward(const AttrMap& attrs) {
  RETURN_IF_ERROR(GetRequiredSizedInts(attrs, "input_shape", 4, 1).status());
  return attrs.GetBool("align_corners", false).status();
}

absl::Status ValidateResizeNearest(const AttrMap& attrs) {
  return GetRequiredSizedInts(attrs, "size", 2, 1).status();
}

absl::Status ValidateResizeNearestBackward(const AttrMap& attrs) {
  return GetRequiredSizedInts(attrs, "input_shape", 4, 1).status();
}

absl::Status ExpectActivation(const TensorType& type, int index, std::string_view role) {
  RETURN_IF_ERROR(ExpectRank(type, 4, index, role));
  return ExpectFloating(type, index, role);
}

// [N,OH,OW,C] of a pooling window over [N,H,W,C].
absl::StatusOr<Shape> PooledShape(const PoolAttrs& pool, const Shape& input,
                                  std::string_view what) {
  absl::StatusOr<int64_t> height = WindowOutputSize(input[1], pool.kernel[0], pool.strides[0],
                                                    pool.pads[0], pool.pads[2], 1, "height");
  if (!height.ok()) return Annotate(height.status(), what);
  absl::StatusOr<int64_t> width = WindowOutputSize(input[2], pool.kernel[1], pool.strides[1],
                                                   pool.pads[1], pool.pads[3], 1, "width");
  if (!width.ok()) return Annotate(width.status(), what);
  return Shape{input[0], *height, *width, input[3]};
}

absl::Status ExpectShape(const TensorType& type, const Shape& expected, int index,
                         std::string_view role, std::string_view what) {
  if (type.shape == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must have shape {}, got {} ({})",
                                                index, role, ShapeToString(expected),
                                                TypeToString(type), what));
}

absl::Status ExpectSameDType(const TensorType& type, int index, std::string_view role,
                             const TensorType& reference) {
  if (type.dtype == reference.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("input {} ({}) must be {} like input 0, got {}",
                                                index, role, DTypeName(reference.dtype),
                                                TypeToString(type)));
}

// ---- max_pool, avg_pool ----

absl::StatusOr<std::vector<TensorType>> InferPool(const AttrMap& attrs,
                                                  std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  RETURN_IF_ERROR(ExpectActivation(x, 0, "x"));
  ASSIGN_OR_RETURN(PoolAttrs pool, ParsePoolAttrs(attrs));
  ASSIGN_OR_RETURN(Shape y_shape, PooledShape(pool, x.shape, fmt::format("x {}", TypeToString(x))));
  return std::vector<TensorType>{{x.dtype, y_shape, Layout::kNHWC}};
}

// dy, x: dx has x's type; dy has the pooled shape of x. The kernel finds
// each window's maximum again in x (it is exactly the forward's y), so y
// need not be kept for the backward pass.
absl::StatusOr<std::vector<TensorType>> InferMaxPoolBackward(const AttrMap& attrs,
                                                             std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  const TensorType& x = inputs[1];
  RETURN_IF_ERROR(ExpectActivation(dy, 0, "dy"));
  RETURN_IF_ERROR(ExpectActivation(x, 1, "x"));
  RETURN_IF_ERROR(ExpectSameDType(x, 1, "x", dy));
  ASSIGN_OR_RETURN(PoolAttrs pool, ParsePoolAttrs(attrs));
  const std::string what = fmt::format("x {}", TypeToString(x));
  ASSIGN_OR_RETURN(Shape y_shape, PooledShape(pool, x.shape, what));
  RETURN_IF_ERROR(ExpectShape(dy, y_shape, 0, "dy", what));
  return std::vector<TensorType>{{x.dtype, x.shape, Layout::kNHWC}};
}

absl::StatusOr<std::vector<TensorType>> InferAvgPoolBackward(const AttrMap& attrs,
                                                             std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  RETURN_IF_ERROR(ExpectActivation(dy, 0, "dy"));
  ASSIGN_OR_RETURN(PoolAttrs pool, ParsePoolAttrs(attrs));
  const Shape input_shape = attrs.Ints("input_shape");
  const std::string what = fmt::format("input_shape {}", ShapeToString(input_shape));
  ASSIGN_OR_RETURN(Shape y_shape, PooledShape(pool, input_shape, what));
  RETURN_IF_ERROR(ExpectShape(dy, y_shape, 0, "dy", what));
  return std::vector<TensorType>{{dy.dtype, input_shape, Layout::kNHWC}};
}

// Every output element is a max or sum over one window, KH*KW inputs; the
// average adds a divide.
OpCost MaxPoolCost(const AttrMap& attrs, std::span<const TensorType> inputs,
                   std::span<const TensorType> outputs) {
  const PoolAttrs pool = ValidPoolAttrs(attrs);
  return ElementwiseCost(inputs, outputs, pool.kernel[0] * pool.kernel[1]);
}

OpCost AvgPoolCost(const AttrMap& attrs, std::span<const TensorType> inputs,
                   std::span<const TensorType> outputs) {
  const PoolAttrs pool = ValidPoolAttrs(attrs);
  return ElementwiseCost(inputs, outputs, pool.kernel[0] * pool.kernel[1] + 1);
}

// Backward kernels walk the windows of dy: max pool finds the argmax again (KH*KW
// comparisons) and adds dy there; avg pool adds dy/count to KH*KW inputs.
OpCost PoolBackwardCost(const AttrMap& attrs, std::span<const TensorType> inputs,
                        std::span<const TensorType> outputs) {
  const PoolAttrs pool = ValidPoolAttrs(attrs);
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]) * (pool.kernel[0] * pool.kernel[1] + 1);
  return cost;
}

// ---- global_avg_pool ----

absl::StatusOr<std::vector<TensorType>> InferGlobalAvgPool(const AttrMap& /*attrs*/,
                                                           std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  RETURN_IF_ERROR(ExpectActivation(x, 0, "x"));
  if (x.shape[1] < 1 || x.shape[2] < 1) {
    return absl::InvalidArgumentError(
        fmt::format("input 0 (x) has no pixels to average, got {}", TypeToString(x)));
  }
  return std::vector<TensorType>{{x.dtype, {x.shape[0], 1, 1, x.shape[3]}, Layout::kNHWC}};
}

absl::StatusOr<std::vector<TensorType>> InferGlobalAvgPoolBackward(
    const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  RETURN_IF_ERROR(ExpectActivation(dy, 0, "dy"));
  const Shape input_shape = attrs.Ints("input_shape");
  RETURN_IF_ERROR(ExpectShape(dy, {input_shape[0], 1, 1, input_shape[3]}, 0, "dy",
                              fmt::format("input_shape {}", ShapeToString(input_shape))));
  return std::vector<TensorType>{{dy.dtype, input_shape, Layout::kNHWC}};
}

// One add per input element and one divide per output element.
OpCost GlobalAvgPoolCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                         std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]) + Elements(outputs[0]);
  return cost;
}

// dx = dy / (H*W) broadcast: one divide (a multiply by 1/(H*W)) per element of dx.
OpCost GlobalAvgPoolBackwardCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                                 std::span<const TensorType> outputs) {
  return ElementwiseCost(inputs, outputs, 1);
}

// ---- resize_bilinear, resize_nearest ----

// x [N,H,W,C] -> [N,OH,OW,C] with size = [OH,OW].
absl::StatusOr<std::vector<TensorType>> InferResize(const AttrMap& attrs,
                                                    std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  RETURN_IF_ERROR(ExpectActivation(x, 0, "x"));
  if (x.shape[1] < 1 || x.shape[2] < 1) {
    return absl::InvalidArgumentError(
        fmt::format("input 0 (x) has no pixels to interpolate, got {}", TypeToString(x)));
  }
  const IntList size = attrs.Ints("size");
  return std::vector<TensorType>{
      {x.dtype, {x.shape[0], size[0], size[1], x.shape[3]}, Layout::kNHWC}};
}

// dy [N,OH,OW,C] -> dx of input_shape [N,H,W,C].
absl::StatusOr<std::vector<TensorType>> InferResizeBackward(const AttrMap& attrs,
                                                            std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  RETURN_IF_ERROR(ExpectActivation(dy, 0, "dy"));
  const Shape input_shape = attrs.Ints("input_shape");
  if (dy.shape[0] != input_shape[0] || dy.shape[3] != input_shape[3]) {
    return absl::InvalidArgumentError(
        fmt::format("input 0 (dy) must have the batch and channels of input_shape {}, got {}",
                    ShapeToString(input_shape), TypeToString(dy)));
  }
  return std::vector<TensorType>{{dy.dtype, input_shape, Layout::kNHWC}};
}

OpCost ResizeBilinearCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                          std::span<const TensorType> outputs) {
  return ElementwiseCost(inputs, outputs, kBilinearFlops);
}

OpCost ResizeBilinearBackwardCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                                  std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]) * kBilinearBackwardFlops;
  return cost;
}

// Nearest resize copies: no FLOPs, the default bytes-only cost. Its backward
// adds each dy element into one dx element.
OpCost ResizeNearestBackwardCost(const AttrMap& /*attrs*/, std::span<const TensorType> inputs,
                                 std::span<const TensorType> outputs) {
  OpCost cost = BytesOnlyCost(inputs, outputs);
  cost.flops = Elements(inputs[0]);
  return cost;
}

OpDef PoolingDef(OpKind kind, int num_inputs, bool differentiable, ValidateFn validate,
                 InferFn infer, CostFn cost) {
  return {.kind = kind,
          .op_class = OpClass::kPooling,
          .min_inputs = num_inputs,
          .max_inputs = num_inputs,
          .output_names = {},
          .differentiable = differentiable,
          .in_place = {},
          .validate = validate,
          .infer = infer,
          .cost = cost};
}

}  // namespace

void RegisterPoolingOps(std::vector<OpDef>& defs) {
  defs.push_back(PoolingDef(OpKind::kMaxPool, 1, true, ValidateMaxPool, InferPool, MaxPoolCost));
  defs.push_back(PoolingDef(OpKind::kMaxPoolBackward, 2, false, ValidateMaxPool,
                            InferMaxPoolBackward, PoolBackwardCost));
  defs.push_back(PoolingDef(OpKind::kAvgPool, 1, true, ValidateAvgPool, InferPool, AvgPoolCost));
  defs.push_back(PoolingDef(OpKind::kAvgPoolBackward, 1, false, ValidateAvgPoolBackward,
                            InferAvgPoolBackward, PoolBackwardCost));
  defs.push_back(
      PoolingDef(OpKind::kGlobalAvgPool, 1, true, nullptr, InferGlobalAvgPool, GlobalAvgPoolCost));
  defs.push_back(PoolingDef(OpKind::kGlobalAvgPoolBackward, 1, false, ValidateGlobalAvgPoolBackward,
                            InferGlobalAvgPoolBackward, GlobalAvgPoolBackwardCost));
  // Resizing moves data rather than reducing it, so the cost model treats it as
  // data movement.
  for (OpDef resize : {
           PoolingDef(OpKind::kResizeBilinear, 1, true, ValidateResizeBilinear, InferResize,
                      ResizeBilinearCost),
           PoolingDef(OpKind::kResizeBilinearBackward, 1, false, ValidateResizeBilinearBackward,
                      InferResizeBackward, ResizeBilinearBackwardCost),
           PoolingDef(OpKind::kResizeNearest, 1, true, ValidateResizeNearest, InferResize, nullptr),
           PoolingDef(OpKind::kResizeNearestBackward, 1, false, ValidateResizeNearestBackward,
                      InferResizeBackward, ResizeNearestBackwardCost),
       }) {
    resize.op_class = OpClass::kDataMovement;
    defs.push_back(std::move(resize));
  }
}

}  // namespace spillway::ir::ops
