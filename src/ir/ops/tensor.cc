// Data-movement ops: concat, slice and its gradient, reshape, transpose,
// flatten. They do no arithmetic, so their cost is the bytes they move (the
// registry's default cost).
#include <algorithm>
#include <numeric>
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

using Types = std::vector<TensorType>;

OpDef MakeDef(OpKind kind, int min_inputs, int max_inputs, bool differentiable, ValidateFn validate,
              InferFn infer) {
  OpDef def;
  def.kind = kind;
  def.op_class = OpClass::kDataMovement;
  def.min_inputs = min_inputs;
  def.max_inputs = max_inputs;
  def.differentiable = differentiable;
  def.validate = validate;
  def.infer = infer;
  return def;
}

// ---- concat ----

absl::Status ValidateConcat(const AttrMap& attrs) { return attrs.GetInt("axis").status(); }

absl::StatusOr<Types> InferConcat(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& first = inputs[0];
  if (first.rank() == 0) {
    return absl::InvalidArgumentError(
        fmt::format("cannot concatenate scalars, input 0 is {}", TypeToString(first)));
  }
  absl::StatusOr<int64_t> axis = NormalizeAxis(attrs.Int("axis"), first.rank());
  if (!axis.ok())
    return Annotate(axis.status(),
                    fmt::format("attribute 'axis' of input 0 {}", TypeToString(first)));
  Shape shape = first.shape;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const TensorType& other = inputs[i];
    bool matches = other.dtype == first.dtype && other.rank() == first.rank();
    for (int64_t d = 0; matches && d < first.rank(); ++d) {
      const size_t index = static_cast<size_t>(d);
      matches = d == *axis || other.shape[index] == first.shape[index];
    }
    if (!matches) {
      return absl::InvalidArgumentError(fmt::format(
          "input {} {} does not match input 0 {}: all inputs must have one dtype and rank and "
          "equal dimensions except along axis {}",
          i, TypeToString(other), TypeToString(first), *axis));
    }
    shape[static_cast<size_t>(*axis)] += other.shape[static_cast<size_t>(*axis)];
  }
  const int64_t rank = static_cast<int64_t>(shape.size());
  return Types{TensorType{first.dtype, std::move(shape), OutputLayout(inputs, rank)}};
}

// ---- slice ----

struct SliceSpec {
  IntList axes;
  IntList starts;
  IntList ends;
  IntList steps;
};

absl::StatusOr<SliceSpec> ReadSliceSpec(const AttrMap& attrs) {
  SliceSpec spec;
  ASSIGN_OR_RETURN(spec.axes, attrs.GetInts("axes"));
  ASSIGN_OR_RETURN(spec.starts, attrs.GetInts("starts"));
  ASSIGN_OR_RETURN(spec.ends, attrs.GetInts("ends"));
  ASSIGN_OR_RETURN(spec.steps, attrs.GetInts("steps", IntList(spec.axes.size(), 1)));
  if (spec.starts.size() != spec.axes.size() || spec.ends.size() != spec.axes.size() ||
      spec.steps.size() != spec.axes.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "attributes 'axes' {}, 'starts' {}, 'ends' {} and 'steps' {} must have one length",
        AttrValueToString(spec.axes), AttrValueToString(spec.starts), AttrValueToString(spec.ends),
        AttrValueToString(spec.steps)));
  }
  for (int64_t step : spec.steps) {
    // Negative steps (reversal) have no use in the models and no kernel.
    if (step < 1) {
      return absl::InvalidArgumentError(fmt::format(
          "attribute 'steps' entries must be >= 1, got {}", AttrValueToString(spec.steps)));
    }
  }
  return spec;
}

absl::Status ValidateSlice(const AttrMap& attrs) { return ReadSliceSpec(attrs).status(); }

// Numpy's basic slicing with a positive step: negative indices count from the
// end, then both bounds are clamped to [0, dim], so ends=[INT64_MAX] means
// "to the end" and an empty range gives an extent of 0.
absl::StatusOr<Shape> SlicedShape(const Shape& shape, const SliceSpec& spec) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  Shape result = shape;
  std::vector<bool> seen(shape.size(), false);
  for (size_t i = 0; i < spec.axes.size(); ++i) {
    absl::StatusOr<int64_t> axis = NormalizeAxis(spec.axes[i], rank);
    if (!axis.ok()) {
      return Annotate(axis.status(),
                      fmt::format("attribute 'axes' for shape {}", ShapeToString(shape)));
    }
    const size_t index = static_cast<size_t>(*axis);
    if (seen[index]) {
      return absl::InvalidArgumentError(fmt::format("attribute 'axes' {} names axis {} twice",
                                                    AttrValueToString(spec.axes), *axis));
    }
    seen[index] = true;
    const int64_t dim = shape[index];
    auto clamp = [dim](int64_t bound) {
      // bound + dim cannot overflow: bound is negative and dim is not.
      return std::clamp<int64_t>(bound < 0 ? bound + dim : bound, 0, dim);
    };
    const int64_t start = clamp(spec.starts[i]);
    const int64_t end = clamp(spec.ends[i]);
    // 1 + (n - 1) / step is ceil(n / step) without the overflow of n + step - 1.
    result[index] = end > start ? 1 + (end - start - 1) / spec.steps[i] : 0;
  }
  return result;
}

absl::StatusOr<Types> InferSlice(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  ASSIGN_OR_RETURN(SliceSpec spec, ReadSliceSpec(attrs));
  ASSIGN_OR_RETURN(Shape shape, SlicedShape(x.shape, spec));
  return Types{TensorType{x.dtype, std::move(shape), x.layout}};
}

absl::Status ValidateSliceBackward(const AttrMap& attrs) {
  RETURN_IF_ERROR(ValidateSlice(attrs));
  ASSIGN_OR_RETURN(IntList input_shape, attrs.GetInts("input_shape"));
  if (!NumElements(input_shape).has_value()) {
    return absl::InvalidArgumentError(fmt::format("attribute 'input_shape' {} is not a valid shape",
                                                  AttrValueToString(input_shape)));
  }
  return absl::OkStatus();
}

// dx has the forward input's shape; dy must be exactly what the forward slice made of it.
absl::StatusOr<Types> InferSliceBackward(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& dy = inputs[0];
  RETURN_IF_ERROR(ExpectFloating(dy, 0, "dy"));
  const Shape input_shape = attrs.Ints("input_shape");
  if (dy.rank() != static_cast<int64_t>(input_shape.size())) {
    return absl::InvalidArgumentError(fmt::format("dy {} must have the rank of input_shape {}",
                                                  TypeToString(dy), ShapeToString(input_shape)));
  }
  ASSIGN_OR_RETURN(SliceSpec spec, ReadSliceSpec(attrs));
  ASSIGN_OR_RETURN(Shape sliced, SlicedShape(input_shape, spec));
  if (sliced != dy.shape) {
    return absl::InvalidArgumentError(
        fmt::format("dy {} does not match the slice of input_shape {}, which is {}",
                    TypeToString(dy), ShapeToString(input_shape), ShapeToString(sliced)));
  }
  return Types{TensorType{dy.dtype, input_shape, dy.layout}};
}

// ---- reshape ----

// The optional `layout` tag of reshape and transpose results ("row_major"
// or "nhwc", which needs rank 4); nullopt when not given.
absl::StatusOr<std::optional<Layout>> ValidateLayout(const AttrMap& attrs, int64_t rank) {
  if (!attrs.Has("layout")) return std::optional<Layout>();
  // GCC 12 at -O3 wrongly reports a moved-out std::string as maybe uninitialized.
  const absl::StatusOr<std::string> layout_name_or = attrs.GetString("layout");
  if (!layout_name_or.ok()) return layout_name_or.status();
  const std::string& layout_name = *layout_name_or;
  std::optional<Layout> layout = ParseLayout(layout_name);
  if (!layout.has_value()) {
    return absl::InvalidArgumentError(fmt::format(
        "attribute 'layout' must be \"row_major\" or \"nhwc\", got \"{}\"", layout_name));
  }
  if (*layout == Layout::kNHWC && rank != 4) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'layout' \"nhwc\" needs a rank-4 result, got rank {}", rank));
  }
  return layout;
}

absl::Status ValidateReshape(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(IntList shape, attrs.GetInts("shape"));
  int inferred_dims = 0;
  for (int64_t dim : shape) {
    // 0 means "an empty axis" in numpy and "copy the input's dim" in ONNX; neither is meant here.
    if (dim == 0 || dim < -1) {
      return absl::InvalidArgumentError(fmt::format(
          "attribute 'shape' entries must be positive or -1, got {}", AttrValueToString(shape)));
    }
    if (dim == -1) ++inferred_dims;
  }
  if (inferred_dims > 1) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'shape' may have one -1 entry, got {}", AttrValueToString(shape)));
  }
  return ValidateLayout(attrs, static_cast<int64_t>(shape.size())).status();
}

absl::StatusOr<Types> InferReshape(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  Shape shape = attrs.Ints("shape");
  const int64_t count = Elements(x);
  Shape known = shape;
  std::replace(known.begin(), known.end(), int64_t{-1}, int64_t{1});
  std::optional<int64_t> known_count = NumElements(known);
  if (!known_count.has_value()) {
    return absl::InvalidArgumentError(fmt::format(
        "attribute 'shape' {} has more elements than int64 holds", ShapeToString(shape)));
  }
  auto inferred = std::find(shape.begin(), shape.end(), int64_t{-1});
  if (inferred != shape.end()) {
    if (count % *known_count != 0) {
      return absl::InvalidArgumentError(
          fmt::format("cannot reshape {} ({} elements) to {}: {} is not a multiple of {}",
                      TypeToString(x), count, ShapeToString(shape), count, *known_count));
    }
    *inferred = count / *known_count;
  } else if (*known_count != count) {
    return absl::InvalidArgumentError(
        fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", TypeToString(x), count,
                    ShapeToString(shape), *known_count));
  }
  const Layout layout = *ParseLayout(*attrs.GetString("layout", "row_major"));
  return Types{TensorType{x.dtype, std::move(shape), layout}};
}

// ---- transpose ----

absl::Status ValidateTranspose(const AttrMap& attrs) {
  ASSIGN_OR_RETURN(IntList perm, attrs.GetInts("perm"));
  IntList sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  IntList identity(perm.size());
  std::iota(identity.begin(), identity.end(), int64_t{0});
  if (sorted != identity) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'perm' {} is not a permutation of 0..{}", AttrValueToString(perm),
                    static_cast<int64_t>(perm.size()) - 1));
  }
  return ValidateLayout(attrs, static_cast<int64_t>(perm.size())).status();
}

absl::StatusOr<Types> InferTranspose(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  const IntList perm = attrs.Ints("perm");
  if (static_cast<int64_t>(perm.size()) != x.rank()) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'perm' {} has {} entries but x {} has rank {}",
                    AttrValueToString(perm), perm.size(), TypeToString(x), x.rank()));
  }
  Shape shape(perm.size());
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) {
    shape[i] = x.shape[static_cast<size_t>(perm[i])];
    identity = identity && perm[i] == static_cast<int64_t>(i);
  }
  // The NHWC tag says which logical axis is which; after a real permutation
  // it no longer holds, unless the permutation made the result NHWC and the
  // `layout` attribute says so.
  // The optional is opened only when the attribute is there: GCC 12 at -O3
  // otherwise computes the result from the empty optional's payload bytes
  // (then discards it), which valgrind's memcheck reports as a use of
  // uninitialised memory in every later reader of the layout.
  Layout layout = identity ? x.layout : Layout::kRowMajor;
  if (attrs.Has("layout")) layout = **ValidateLayout(attrs, x.rank());
  return Types{TensorType{x.dtype, std::move(shape), layout}};
}

// ---- flatten ----

absl::Status ValidateFlatten(const AttrMap& attrs) { return attrs.GetInt("axis", 1).status(); }

absl::StatusOr<Types> InferFlatten(const AttrMap& attrs, std::span<const TensorType> inputs) {
  const TensorType& x = inputs[0];
  const int64_t axis = *attrs.GetInt("axis", 1);
  // As in ONNX, axis may equal the rank (everything goes to the outer dimension).
  const int64_t normalized = axis < 0 ? axis + x.rank() : axis;
  if (normalized < 0 || normalized > x.rank()) {
    return absl::InvalidArgumentError(
        fmt::format("attribute 'axis' {} is out of range [{}, {}] for x {}", axis, -x.rank(),
                    x.rank(), TypeToString(x)));
  }
  const auto split = x.shape.begin() + normalized;
  const int64_t outer = *NumElements(Shape(x.shape.begin(), split));
  const int64_t inner = *NumElements(Shape(split, x.shape.end()));
  return Types{TensorType{x.dtype, {outer, inner}, Layout::kRowMajor}};
}

}  // namespace

void RegisterTensorOps(std::vector<OpDef>& defs) {
  defs.push_back(MakeDef(OpKind::kConcat, 1, -1, true, ValidateConcat, InferConcat));
  defs.push_back(MakeDef(OpKind::kSlice, 1, 1, true, ValidateSlice, InferSlice));
  defs.push_back(
      MakeDef(OpKind::kSliceBackward, 1, 1, false, ValidateSliceBackward, InferSliceBackward));
  defs.push_back(MakeDef(OpKind::kReshape, 1, 1, true, ValidateReshape, InferReshape));
  defs.push_back(MakeDef(OpKind::kTranspose, 1, 1, true, ValidateTranspose, InferTranspose));
  defs.push_back(MakeDef(OpKind::kFlatten, 1, 1, true, ValidateFlatten, InferFlatten));
}

}  // namespace spillway::ir::ops
