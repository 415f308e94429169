// Converters of the ops that move or reshape tensors, and the shape
// arithmetic exporters emit around them (Shape, Gather, Cast, Concat, Slice,
// Unsqueeze on shapes, ConstantOfShape), folded to constants when every
// input is known.
#include <algorithm>
#include <climits>
#include <numeric>

#include "fmt/format.h"
#include "onnx/converter.h"
#include "support/status_macros.h"

namespace spillway::onnx::internal {
namespace {

using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

// The most elements a folded constant may have: shapes and fills, not data.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

absl::StatusOr<int64_t> NormalizedAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// The axes of Squeeze, Unsqueeze and ReduceXxx: an attribute before opset 13,
// an input from then on. nullopt: not given.
absl::StatusOr<std::optional<ir::IntList>> AxesOf(const Importer& importer, const NodeProto& node) {
  if (importer.opset() < 13) return IntsAttr(node, "axes");
  if (importer.Input(node, 1) == nullptr) return std::optional<ir::IntList>();
  const Constant* axes = importer.ConstantInput(node, 1);
  if (!axes || axes->is_float) {
    return absl::UnimplementedError("the axes must be a known integer constant");
  }
  return std::optional<ir::IntList>(axes->ints);
}

// A 1-D integer input that must be known: Slice's starts, Split's sizes.
absl::StatusOr<std::optional<ir::IntList>> KnownInts(const Importer& importer,
                                                     const NodeProto& node, int index,
                                                     std::string_view what) {
  if (importer.Input(node, index) == nullptr) return std::optional<ir::IntList>();
  const Constant* c = importer.ConstantInput(node, index);
  if (!c || c->is_float) {
    return absl::UnimplementedError(fmt::format("{} must be a known integer constant", what));
  }
  return std::optional<ir::IntList>(c->ints);
}

// Reshapes in ONNX order: a known value is folded; data is brought to ONNX
// element order, given `target` and defined as the node's output (NHWC again
// if 4-D). Where the
// NHWC and NCHW orders agree, one reshape does it all.
ConvertResult ReshapeInOnnxOrder(Importer& importer, const NodeProto& node, ir::Shape target) {
  const ir::Shape shape = importer.InputShape(node, 0);
  if (ir::NumElements(target) != ir::NumElements(shape)) {
    return absl::InvalidArgumentError(fmt::format(
        "cannot reshape {} to {}", ir::ShapeToString(shape), ir::ShapeToString(target)));
  }
  if (importer.Foldable(node, 0)) {
    Constant c = *importer.ConstantInput(node, 0);
    c.shape = std::move(target);
    importer.DefineConstant(node.output(0), std::move(c));
    return std::nullopt;
  }
  if (target == shape) {
    RETURN_IF_ERROR(importer.Alias(node.output(0), node.input(0)));
    return std::nullopt;
  }
  ir::ValueId x = ir::kInvalidValue;
  if (importer.IsNhwc(node, 0) && !OrdersAgree(shape)) {
    ASSIGN_OR_RETURN(x, importer.DataInOnnxOrder(node, 0));
  } else {
    ASSIGN_OR_RETURN(x, importer.Data(node, 0));
  }
  const bool nhwc = target.size() == 4 && importer.graph().value(x).type.dtype == ir::DType::kF32;
  ir::AttrMap attrs;
  if (nhwc && OrdersAgree(target)) {
    attrs.Set("shape", NchwToNhwc(target));
    attrs.Set("layout", std::string("nhwc"));
    ASSIGN_OR_RETURN(const ir::ValueId y, importer.AddOp(node, ir::OpKind::kReshape, {x}, attrs));
    importer.Define(node.output(0), y, true);
    return std::nullopt;
  }
  attrs.Set("shape", std::move(target));
  ASSIGN_OR_RETURN(const ir::ValueId y, importer.AddOp(node, ir::OpKind::kReshape, {x}, attrs));
  RETURN_IF_ERROR(importer.DefineFromOnnxOrder(node, node.output(0), y));
  return std::nullopt;
}

// ---- Folded shape arithmetic ----

ConvertResult ConvertConstant(Importer& importer, const NodeProto& node) {
  if (node.attribute_size() != 1) {
    return absl::InvalidArgumentError("Constant must have exactly one attribute");
  }
  const AttributeProto& attr = node.attribute(0);
  Constant c;
  if (attr.name() == "value") {
    ASSIGN_OR_RETURN(c, ReadTensor(attr.t()));
  } else if (attr.name() == "value_float") {
    c.is_float = true;
    c.floats = {attr.f()};
  } else if (attr.name() == "value_floats") {
    c.is_float = true;
    c.floats.assign(attr.floats().begin(), attr.floats().end());
    c.shape = {c.size()};
  } else if (attr.name() == "value_int") {
    c.ints = {attr.i()};
  } else if (attr.name() == "value_ints") {
    c.ints.assign(attr.ints().begin(), attr.ints().end());
    c.shape = {c.size()};
  } else {
    return Refuse(fmt::format("Constant attribute '{}' is not supported", attr.name()));
  }
  importer.DefineConstant(node.output(0), std::move(c));
  return std::nullopt;
}

ConvertResult ConvertConstantOfShape(Importer& importer, const NodeProto& node) {
  const Constant* shape = importer.ConstantInput(node, 0);
  if (!shape || shape->is_float || shape->shape.size() != 1) {
    return Refuse("the shape must be a known 1-D integer constant");
  }
  Constant c;
  c.is_float = true;
  c.floats = {0.0f};
  if (const AttributeProto* value = FindAttr(node, "value")) {
    ASSIGN_OR_RETURN(c, ReadTensor(value->t()));
    if (c.size() != 1) return absl::InvalidArgumentError("'value' must have one element");
  }
  for (int64_t dim : shape->ints) {
    if (dim < 0) return absl::InvalidArgumentError("ConstantOfShape with a negative dimension");
  }
  const std::optional<int64_t> count = ir::NumElements(shape->ints);
  if (!count || *count > kMaxFoldedElements) {
    return Refuse(
        fmt::format("a constant of shape {} is too large to fold", ir::ShapeToString(shape->ints)));
  }
  c.shape = shape->ints;
  if (c.is_float) {
    c.floats.assign(static_cast<size_t>(*count), c.floats[0]);
  } else {
    c.ints.assign(static_cast<size_t>(*count), c.ints[0]);
  }
  importer.DefineConstant(node.output(0), std::move(c));
  return std::nullopt;
}

ConvertResult ConvertShape(Importer& importer, const NodeProto& node) {
  const ir::Shape shape = importer.InputShape(node, 0);
  const auto rank = static_cast<int64_t>(shape.size());
  auto clamp = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
  const int64_t start = clamp(IntAttr(node, "start", 0));
  const int64_t end = clamp(IntAttr(node, "end", rank));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(shape[static_cast<size_t>(i)]);
  importer.DefineConstant(node.output(0), FoldedInts({static_cast<int64_t>(dims.size())}, dims));
  return std::nullopt;
}

ConvertResult ConvertCast(Importer& importer, const NodeProto& node) {
  const int64_t to = IntAttr(node, "to", 0);
  const bool to_float = to == TensorProto::FLOAT || to == TensorProto::DOUBLE;
  const bool to_int = to == TensorProto::INT64 || to == TensorProto::INT32;
  if (!to_float && !to_int) return Refuse("Cast to a type other than float, double or an integer");
  const Constant* x = importer.Foldable(node, 0) ? importer.ConstantInput(node, 0) : nullptr;
  if (x == nullptr) {
    // Casting a value to the type it has (f32 data to float) is the identity.
    const Entry& entry = *importer.Input(node, 0);
    if (entry.value == ir::kInvalidValue) return Refuse("casting a float initializer");
    const ir::DType dtype = importer.graph().value(entry.value).type.dtype;
    if ((to_float && dtype == ir::DType::kF32) ||
        (to == TensorProto::INT64 && dtype == ir::DType::kI64)) {
      RETURN_IF_ERROR(importer.Alias(node.output(0), node.input(0)));
      return std::nullopt;
    }
    return Refuse("casts only constants (shape arithmetic) or values already of the target type");
  }
  Constant c = *x;
  if (to_float && !x->is_float) {
    c.is_float = true;
    c.floats.assign(x->ints.begin(), x->ints.end());
    c.ints.clear();
  } else if (to_int && x->is_float) {
    c.is_float = false;
    for (float f : x->floats) c.ints.push_back(static_cast<int64_t>(f));
    c.floats.clear();
  }
  importer.DefineConstant(node.output(0), std::move(c));
  return std::nullopt;
}

ConvertResult ConvertGather(Importer& importer, const NodeProto& node) {
  if (!importer.AllInputsFoldable(node)) {
    return Refuse("only folded over constant inputs (shape arithmetic)");
  }
  const Constant* x = importer.ConstantInput(node, 0);
  const Constant* indices = importer.ConstantInput(node, 1);
  if (x->shape.size() != 1 || IntAttr(node, "axis", 0) != 0 || indices->is_float ||
      indices->shape.size() > 1) {
    return Refuse("folding supports gathering scalars or 1-D indices from a 1-D constant");
  }
  Constant picked;
  picked.is_float = x->is_float;
  picked.shape = indices->shape;
  const int64_t n = x->size();
  for (int64_t i : indices->ints) {
    if (i < -n || i >= n) return absl::InvalidArgumentError("Gather index out of range");
    const auto at = static_cast<size_t>(i < 0 ? i + n : i);
    if (x->is_float) {
      picked.floats.push_back(x->floats[at]);
    } else {
      picked.ints.push_back(x->ints[at]);
    }
  }
  importer.DefineConstant(node.output(0), std::move(picked));
  return std::nullopt;
}

// ---- Layout and shape changes, folded for constants ----

// Unsqueeze and Squeeze: the shape with axes inserted or removed.
ConvertResult ConvertSqueezeOrUnsqueeze(Importer& importer, const NodeProto& node) {
  const bool unsqueeze = node.op_type() == "Unsqueeze";
  const ir::Shape shape = importer.InputShape(node, 0);
  ASSIGN_OR_RETURN(const std::optional<ir::IntList> given, AxesOf(importer, node));
  ir::Shape target;
  if (unsqueeze) {
    if (!given) return absl::InvalidArgumentError("Unsqueeze needs axes");
    const auto rank = static_cast<int64_t>(shape.size() + given->size());
    std::vector<bool> inserted(static_cast<size_t>(rank), false);
    for (int64_t axis : *given) {
      ASSIGN_OR_RETURN(const int64_t a, NormalizedAxis(axis, rank));
      if (inserted[static_cast<size_t>(a)]) return absl::InvalidArgumentError("repeated axis");
      inserted[static_cast<size_t>(a)] = true;
    }
    auto next = shape.begin();
    for (int64_t a = 0; a < rank; ++a)
      target.push_back(inserted[static_cast<size_t>(a)] ? 1 : *next++);
  } else {
    const auto rank = static_cast<int64_t>(shape.size());
    std::vector<bool> removed(shape.size(), false);
    for (int64_t a = 0; a < rank; ++a)
      removed[static_cast<size_t>(a)] = !given && shape[static_cast<size_t>(a)] == 1;
    for (int64_t axis : given.value_or(ir::IntList{})) {
      ASSIGN_OR_RETURN(const int64_t a, NormalizedAxis(axis, rank));
      if (shape[static_cast<size_t>(a)] != 1) {
        return absl::InvalidArgumentError(
            fmt::format("cannot squeeze axis {} of {}", axis, ir::ShapeToString(shape)));
      }
      removed[static_cast<size_t>(a)] = true;
    }
    for (int64_t a = 0; a < rank; ++a) {
      if (!removed[static_cast<size_t>(a)]) target.push_back(shape[static_cast<size_t>(a)]);
    }
  }
  return ReshapeInOnnxOrder(importer, node, std::move(target));
}

ConvertResult ConvertReshape(Importer& importer, const NodeProto& node) {
  const ir::Shape x = importer.InputShape(node, 0);
  const Constant* shape = importer.ConstantInput(node, 1);
  if (!shape || shape->is_float) return Refuse("the target shape must be a known constant");
  const bool allowzero = IntAttr(node, "allowzero", 0) != 0;
  ir::Shape target;
  int64_t inferred = -1;  // the index of a -1 entry
  for (size_t i = 0; i < shape->ints.size(); ++i) {
    int64_t dim = shape->ints[i];
    if (dim == 0 && !allowzero) {
      if (i >= x.size()) return absl::InvalidArgumentError("Reshape copies a missing dimension");
      dim = x[i];
    }
    if (dim == -1) {
      if (inferred >= 0) return absl::InvalidArgumentError("Reshape with two -1 entries");
      inferred = static_cast<int64_t>(i);
      dim = 1;
    } else if (dim < 0) {
      return absl::InvalidArgumentError(fmt::format("Reshape to a negative dimension {}", dim));
    }
    target.push_back(dim);
  }
  const std::optional<int64_t> total = ir::NumElements(x);
  const std::optional<int64_t> known = ir::NumElements(target);
  if (!total || !known) return absl::InvalidArgumentError("Reshape of a too large tensor");
  if (inferred >= 0) {
    if (*known == 0 || *total % *known != 0) {
      return absl::InvalidArgumentError(fmt::format("cannot reshape {} to {}", ir::ShapeToString(x),
                                                    ir::ShapeToString(shape->ints)));
    }
    target[static_cast<size_t>(inferred)] = *total / *known;
  }
  return ReshapeInOnnxOrder(importer, node, std::move(target));
}

ConvertResult ConvertFlatten(Importer& importer, const NodeProto& node) {
  const ir::Shape x = importer.InputShape(node, 0);
  const auto rank = static_cast<int64_t>(x.size());
  int64_t axis = IntAttr(node, "axis", 1);
  if (axis < 0) axis += rank;
  // As in the IR, axis may equal the rank: everything goes to the outer dimension.
  if (axis < 0 || axis > rank) return absl::InvalidArgumentError("Flatten axis out of range");
  const auto split = x.begin() + axis;
  return ReshapeInOnnxOrder(
      importer, node,
      {*ir::NumElements(ir::Shape(x.begin(), split)), *ir::NumElements(ir::Shape(split, x.end()))});
}

ConvertResult ConvertTranspose(Importer& importer, const NodeProto& node) {
  const Entry& x = *importer.Input(node, 0);
  const ir::Shape shape = importer.InputShape(node, 0);
  const auto rank = static_cast<int64_t>(shape.size());
  ir::IntList perm = IntsAttr(node, "perm").value_or(ir::IntList{});
  if (perm.empty()) {
    for (int64_t a = rank - 1; a >= 0; --a) perm.push_back(a);
  }
  ir::IntList sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  ir::IntList identity(static_cast<size_t>(rank));
  std::iota(identity.begin(), identity.end(), int64_t{0});
  if (sorted != identity)
    return absl::InvalidArgumentError("perm is not a permutation of the axes");
  if (importer.Foldable(node, 0)) return Refuse("transposing a constant is not supported");
  ASSIGN_OR_RETURN(const ir::ValueId value, importer.Data(node, 0));
  // Output axis i is ONNX input axis perm[i]. In the IR, ONNX axis a of an
  // NHWC input sits at NhwcAxis(a), and a 4-D float output is NHWC too:
  // its IR axis j is its ONNX axis {0, 2, 3, 1}[j].
  const bool out_nhwc = rank == 4 && importer.graph().value(value).type.dtype == ir::DType::kF32;
  constexpr int64_t kNhwcToNchw[] = {0, 2, 3, 1};
  ir::IntList ir_perm;
  for (int64_t j = 0; j < rank; ++j) {
    const int64_t onnx_out = out_nhwc ? kNhwcToNchw[j] : j;
    const int64_t onnx_in = perm[static_cast<size_t>(onnx_out)];
    ir_perm.push_back(x.nhwc ? NhwcAxis(onnx_in) : onnx_in);
  }
  if (ir_perm == identity) {
    importer.Define(node.output(0), value, out_nhwc);
    return std::nullopt;
  }
  ir::AttrMap attrs;
  attrs.Set("perm", ir_perm);
  if (out_nhwc) attrs.Set("layout", std::string("nhwc"));
  ASSIGN_OR_RETURN(const ir::ValueId y,
                   importer.AddOp(node, ir::OpKind::kTranspose, {value}, std::move(attrs)));
  importer.Define(node.output(0), y, out_nhwc);
  return std::nullopt;
}

ConvertResult ConvertConcat(Importer& importer, const NodeProto& node) {
  const auto rank = static_cast<int64_t>(importer.InputShape(node, 0).size());
  ASSIGN_OR_RETURN(int64_t axis, NormalizedAxis(IntAttr(node, "axis", 1), rank));
  if (importer.AllInputsFoldable(node)) {
    const Constant& first = *importer.ConstantInput(node, 0);
    Constant joined;
    joined.is_float = first.is_float;
    for (int i = 0; i < node.input_size(); ++i) {
      const Constant& part = *importer.ConstantInput(node, i);
      if (part.shape.size() != 1 || part.is_float != first.is_float) {
        return Refuse("folding concatenates 1-D constants of one type only");
      }
      joined.floats.insert(joined.floats.end(), part.floats.begin(), part.floats.end());
      joined.ints.insert(joined.ints.end(), part.ints.begin(), part.ints.end());
    }
    joined.shape = {joined.size()};
    importer.DefineConstant(node.output(0), std::move(joined));
    return std::nullopt;
  }
  std::vector<ir::ValueId> inputs;
  const bool nhwc = importer.IsNhwc(node, 0);
  for (int i = 0; i < node.input_size(); ++i) {
    if (importer.IsNhwc(node, i) != nhwc)
      return Refuse("concatenating tensors of different layouts");
    ASSIGN_OR_RETURN(ir::ValueId v, importer.Data(node, i));
    inputs.push_back(v);
  }
  if (nhwc) axis = NhwcAxis(axis);
  ir::AttrMap attrs;
  attrs.Set("axis", axis);
  ASSIGN_OR_RETURN(const ir::ValueId y,
                   importer.AddOp(node, ir::OpKind::kConcat, inputs, std::move(attrs)));
  importer.Define(node.output(0), y, nhwc);
  return std::nullopt;
}

// Slice's starts, ends, axes and steps (inputs from opset 10 on).
struct SliceArgs {
  ir::IntList starts, ends, axes, steps;
};

absl::StatusOr<SliceArgs> ReadSliceArgs(const Importer& importer, const NodeProto& node,
                                        int64_t rank) {
  SliceArgs args;
  ASSIGN_OR_RETURN(std::optional<ir::IntList> starts, KnownInts(importer, node, 1, "starts"));
  ASSIGN_OR_RETURN(std::optional<ir::IntList> ends, KnownInts(importer, node, 2, "ends"));
  ASSIGN_OR_RETURN(std::optional<ir::IntList> axes, KnownInts(importer, node, 3, "axes"));
  ASSIGN_OR_RETURN(std::optional<ir::IntList> steps, KnownInts(importer, node, 4, "steps"));
  if (!starts || !ends || starts->size() != ends->size()) {
    return absl::InvalidArgumentError("Slice needs starts and ends of one length");
  }
  args.starts = *starts;
  args.ends = *ends;
  if (axes) {
    for (int64_t axis : *axes) {
      ASSIGN_OR_RETURN(int64_t a, NormalizedAxis(axis, rank));
      args.axes.push_back(a);
    }
  } else {
    for (size_t i = 0; i < starts->size(); ++i) args.axes.push_back(static_cast<int64_t>(i));
  }
  args.steps = steps.value_or(ir::IntList(starts->size(), 1));
  if (args.axes.size() != args.starts.size() || args.steps.size() != args.starts.size()) {
    return absl::InvalidArgumentError("Slice's starts, ends, axes and steps differ in length");
  }
  for (int64_t step : args.steps) {
    if (step == 0) return absl::InvalidArgumentError("Slice with step 0");
  }
  return args;
}

// Python's slice(start, end, step).indices(n), as ONNX defines Slice.
std::vector<int64_t> SlicedIndices(int64_t n, int64_t start, int64_t end, int64_t step) {
  auto clamp = [n, step](int64_t i) {
    if (i < 0) i += n;
    return step > 0 ? std::clamp(i, int64_t{0}, n) : std::clamp(i, int64_t{-1}, n - 1);
  };
  std::vector<int64_t> picked;
  for (int64_t i = clamp(start), e = clamp(end); step > 0 ? i < e : i > e; i += step) {
    picked.push_back(i);
  }
  return picked;
}

ConvertResult ConvertSlice(Importer& importer, const NodeProto& node) {
  if (importer.opset() < 10) return Refuse("Slice before opset 10 is not supported");
  const ir::Shape shape = importer.InputShape(node, 0);
  ASSIGN_OR_RETURN(const SliceArgs args,
                   ReadSliceArgs(importer, node, static_cast<int64_t>(shape.size())));
  if (importer.Foldable(node, 0)) {
    const Constant* x = importer.ConstantInput(node, 0);
    if (x->shape.size() != 1 || args.axes != ir::IntList{0}) {
      return Refuse("folding slices 1-D constants only");
    }
    Constant c;
    c.is_float = x->is_float;
    for (int64_t i : SlicedIndices(x->size(), args.starts[0], args.ends[0], args.steps[0])) {
      if (x->is_float) {
        c.floats.push_back(x->floats[static_cast<size_t>(i)]);
      } else {
        c.ints.push_back(x->ints[static_cast<size_t>(i)]);
      }
    }
    c.shape = {c.size()};
    importer.DefineConstant(node.output(0), std::move(c));
    return std::nullopt;
  }
  const bool nhwc = importer.IsNhwc(node, 0);
  ir::AttrMap attrs;
  ir::IntList axes;
  for (int64_t axis : args.axes) axes.push_back(nhwc ? NhwcAxis(axis) : axis);
  attrs.Set("axes", axes);
  attrs.Set("starts", args.starts);
  attrs.Set("ends", args.ends);
  attrs.Set("steps", args.steps);
  ASSIGN_OR_RETURN(const ir::ValueId x, importer.Data(node, 0));
  ASSIGN_OR_RETURN(const ir::ValueId y,
                   importer.AddOp(node, ir::OpKind::kSlice, {x}, std::move(attrs)));
  importer.Define(node.output(0), y, nhwc);
  return std::nullopt;
}

// Split: one slice per output along `axis`.
ConvertResult ConvertSplit(Importer& importer, const NodeProto& node) {
  const ir::Shape shape = importer.InputShape(node, 0);
  ASSIGN_OR_RETURN(const int64_t axis,
                   NormalizedAxis(IntAttr(node, "axis", 0), static_cast<int64_t>(shape.size())));
  const int64_t extent = shape[static_cast<size_t>(axis)];
  std::optional<ir::IntList> sizes = IntsAttr(node, "split");
  if (importer.opset() >= 13) {
    ASSIGN_OR_RETURN(sizes, KnownInts(importer, node, 1, "split"));
  }
  const int64_t parts = node.output_size();
  if (!sizes) {
    if (extent % parts != 0) {
      return absl::InvalidArgumentError(
          fmt::format("cannot split {} elements into {} equal parts", extent, parts));
    }
    sizes = ir::IntList(static_cast<size_t>(parts), extent / parts);
  }
  if (static_cast<int64_t>(sizes->size()) != parts ||
      std::accumulate(sizes->begin(), sizes->end(), int64_t{0}) != extent ||
      std::any_of(sizes->begin(), sizes->end(), [](int64_t s) { return s < 0; })) {
    return absl::InvalidArgumentError(
        fmt::format("split sizes do not add up to {} over {} outputs", extent, parts));
  }
  if (importer.Foldable(node, 0)) return Refuse("splitting a constant is not supported");
  const bool nhwc = importer.IsNhwc(node, 0);
  ASSIGN_OR_RETURN(const ir::ValueId x, importer.Data(node, 0));
  int64_t start = 0;
  for (int i = 0; i < node.output_size(); ++i) {
    const int64_t size = (*sizes)[static_cast<size_t>(i)];
    if (!node.output(i).empty()) {
      ir::AttrMap attrs;
      attrs.Set("axes", ir::IntList{nhwc ? NhwcAxis(axis) : axis});
      attrs.Set("starts", ir::IntList{start});
      attrs.Set("ends", ir::IntList{start + size});
      ASSIGN_OR_RETURN(
          const ir::ValueId y,
          importer.AddOp(node, ir::OpKind::kSlice, {x}, std::move(attrs), fmt::format(".{}", i)));
      importer.Define(node.output(i), y, nhwc);
    }
    start += size;
  }
  return std::nullopt;
}

ConvertResult ConvertIdentity(Importer& importer, const NodeProto& node) {
  RETURN_IF_ERROR(importer.Alias(node.output(0), node.input(0)));
  return std::nullopt;
}

}  // namespace

void AddTensorConverters(ConverterTable& table) {
  table["Constant"] = {ConvertConstant, 0};
  table["ConstantOfShape"] = {ConvertConstantOfShape, 1};
  table["Shape"] = {ConvertShape, 1};
  table["Cast"] = {ConvertCast, 1};
  table["Gather"] = {ConvertGather, 2};
  table["Unsqueeze"] = {ConvertSqueezeOrUnsqueeze, 1};
  table["Squeeze"] = {ConvertSqueezeOrUnsqueeze, 1};
  table["Reshape"] = {ConvertReshape, 2};
  table["Flatten"] = {ConvertFlatten, 1};
  table["Transpose"] = {ConvertTranspose, 1};
  table["Concat"] = {ConvertConcat, 1};
  table["Slice"] = {ConvertSlice, 3};
  table["Split"] = {ConvertSplit, 1};
  table["Identity"] = {ConvertIdentity, 1};
}

}  // namespace spillway::onnx::internal
