// The gradient rules, one function per forward op, following docs/ops.md and
// the table in docs/autodiff.md. Rules read the forward values they need as
// explicit inputs of the backward nodes: those edges are the saved tensors.
#include "autodiff/gradients.h"

#include <algorithm>

#include "fmt/format.h"
#include "ir/builder.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::autodiff {

using ir::AttrMap;
using ir::IntList;
using ir::kInvalidValue;
using ir::OpKind;
using ir::ValueId;

absl::StatusOr<ValueId> Accumulate(ir::Graph& graph, const ir::Value& value,
                                   const std::vector<ValueId>& partials) {
  for (ValueId partial : partials) {
    const ir::Value& grad = graph.value(partial);
    if (grad.type.shape != value.type.shape || grad.type.dtype != value.type.dtype) {
      return absl::InternalError(fmt::format("gradient '{}' {} does not match value '{}' {}",
                                             grad.name, ir::TypeToString(grad.type), value.name,
                                             ir::TypeToString(value.type)));
    }
  }
  if (partials.size() == 1) return partials.front();
  ASSIGN_OR_RETURN(ir::NodeId node,
                   graph.AddNode(OpKind::kAddN, partials, {}, "grad/" + value.name + ".accumulate",
                                 ir::Phase::kBackward));
  return graph.node(node).outputs.front();
}

GradientContext::GradientContext(ir::Graph& graph, ir::Node node, std::vector<ValueId> output_grads,
                                 std::vector<bool> wants_input_grad,
                                 std::vector<std::vector<ValueId>> earlier_grads)
    : graph_(graph),
      node_(std::move(node)),
      output_grads_(std::move(output_grads)),
      wants_input_grad_(std::move(wants_input_grad)),
      input_grads_(node_.inputs.size(), kInvalidValue),
      earlier_grads_(std::move(earlier_grads)),
      took_(node_.inputs.size(), false) {
  earlier_grads_.resize(node_.inputs.size());
}

ValueId GradientContext::TakeEarlierGrads(size_t input) {
  const std::vector<ValueId>& earlier = earlier_grads_[input];
  if (!status_.ok() || !wants(input) || earlier.empty()) return kInvalidValue;
  const ir::Value value = graph_.value(node_.inputs[input]);  // a copy: the graph grows
  absl::StatusOr<ValueId> sum = Accumulate(graph_, value, earlier);
  if (!sum.ok()) {
    status_ = Annotate(sum.status(), fmt::format("gradient of node '{}'", node_.name));
    return kInvalidValue;
  }
  took_[input] = true;
  return *sum;
}

std::vector<ValueId> GradientContext::Emit(OpKind op, std::vector<ValueId> inputs, AttrMap attrs,
                                           const std::string& suffix) {
  if (!status_.ok()) return {};
  if (std::find(inputs.begin(), inputs.end(), kInvalidValue) != inputs.end()) return {};
  absl::StatusOr<ir::NodeId> added = graph_.AddNode(
      op, std::move(inputs), std::move(attrs), "bwd/" + node_.name + suffix, ir::Phase::kBackward);
  if (!added.ok()) {
    status_ = Annotate(added.status(), fmt::format("gradient of node '{}'", node_.name));
    return {};
  }
  return graph_.node(*added).outputs;
}

ValueId GradientContext::EmitOne(OpKind op, std::vector<ValueId> inputs, AttrMap attrs,
                                 const std::string& suffix) {
  std::vector<ValueId> outputs = Emit(op, std::move(inputs), std::move(attrs), suffix);
  return outputs.empty() ? kInvalidValue : outputs.front();
}

ValueId GradientContext::ReduceTo(ValueId grad, const ir::TensorType& target,
                                  const std::string& suffix) {
  if (grad == kInvalidValue) return grad;
  const ir::TensorType& have = type(grad);
  if (have.shape == target.shape && have.layout == target.layout) return grad;
  SPILLWAY_CHECK(have.shape.size() >= target.shape.size(),
                 "a broadcast result has at least the rank of each operand");
  const size_t rank = have.shape.size();
  const size_t offset = rank - target.shape.size();
  // Numpy broadcasting prepends axes and stretches axes of extent 1; the
  // gradient sums over both. Only the stretched ones need keepdims (and then
  // a reshape); prepended axes simply disappear.
  IntList axes;
  bool stretched = false;
  for (size_t i = 0; i < rank; ++i) {
    if (i < offset) {
      axes.push_back(static_cast<int64_t>(i));
    } else if (target.shape[i - offset] == 1 && have.shape[i] != 1) {
      axes.push_back(static_cast<int64_t>(i));
      stretched = true;
    }
  }
  ValueId reduced = grad;
  if (!axes.empty()) {
    reduced = EmitOne(OpKind::kReduceSum, {grad}, {{"axes", axes}, {"keepdims", stretched}},
                      suffix + ".reduce");
    if (reduced == kInvalidValue) return reduced;
  }
  const ir::TensorType& now = type(reduced);
  if (now.shape == target.shape && now.layout == target.layout) return reduced;
  // The reshape restores the operand's shape and its layout tag (a matmul's
  // result is row-major even where the operand was an NHWC activation).
  return EmitOne(OpKind::kReshape, {reduced},
                 {{"shape", target.shape}, {"layout", std::string(ir::LayoutName(target.layout))}},
                 suffix + ".reshape");
}

void GradientContext::SetInputGrad(size_t input, ValueId grad) {
  if (wants(input)) input_grads_[input] = grad;
}

namespace {

AttrMap With(AttrMap attrs, const std::string& name, ir::AttrValue value) {
  attrs.Set(name, std::move(value));
  return attrs;
}

AttrMap Only(const AttrMap& attrs, std::initializer_list<const char*> names) {
  AttrMap kept;
  for (const char* name : names) {
    auto it = attrs.values().find(name);
    if (it != attrs.values().end()) kept.Set(name, it->second);
  }
  return kept;
}

void Conv2dGrad(GradientContext& c) {
  const AttrMap& attrs = c.node().attrs;
  const ir::TensorType& x = c.type(c.input(0));
  const ir::TensorType& w = c.type(c.input(1));
  if (c.wants(0)) {
    // The other consumers' gradients of x so far are added in by the kernel
    // (into their buffer), so they and this product are never live apart.
    std::vector<ValueId> inputs = {c.dy(), c.input(1)};
    if (const ValueId earlier = c.TakeEarlierGrads(0); earlier != kInvalidValue) {
      inputs.push_back(earlier);
    }
    c.SetInputGrad(0, c.EmitOne(OpKind::kConv2dBackwardData, std::move(inputs),
                                With(attrs, "input_shape", x.shape), ".data"));
  }
  if (c.wants(1)) {
    c.SetInputGrad(1, c.EmitOne(OpKind::kConv2dBackwardWeight, {c.dy(), c.input(0)},
                                With(attrs, "kernel", IntList{w.shape[1], w.shape[2]}), ".weight"));
  }
  if (c.node().inputs.size() > 2 && c.wants(2)) {
    c.SetInputGrad(2,
                   c.EmitOne(OpKind::kReduceSum, {c.dy()}, {{"axes", IntList{0, 1, 2}}}, ".bias"));
  }
}

void BatchNormGrad(GradientContext& c) {
  const AttrMap& attrs = c.node().attrs;
  const bool training = attrs.GetBool("training", true).value_or(true);
  // Training mode reads the batch statistics the forward saved; inference mode
  // the running statistics it normalized with.
  const ValueId mean = training ? c.output(1) : c.input(3);
  const ValueId spread = training ? c.output(2) : c.input(4);
  std::vector<ValueId> grads =
      c.Emit(OpKind::kBatchNormBackward, {c.dy(), c.input(0), c.input(1), mean, spread},
             Only(attrs, {"training", "epsilon"}), "");
  if (grads.size() == 3) {
    for (size_t i = 0; i < 3; ++i) c.SetInputGrad(i, grads[i]);
  }
}

void LayerNormGrad(GradientContext& c) {
  std::vector<ValueId> grads =
      c.Emit(OpKind::kLayerNormBackward, {c.dy(), c.input(0), c.input(1), c.output(1), c.output(2)},
             Only(c.node().attrs, {"epsilon"}), "");
  if (grads.size() == 3) {
    for (size_t i = 0; i < 3; ++i) c.SetInputGrad(i, grads[i]);
  }
}

void UnaryFromOutput(GradientContext& c, OpKind backward, AttrMap attrs) {
  c.SetInputGrad(0, c.EmitOne(backward, {c.dy(), c.output(0)}, std::move(attrs), ""));
}

void AddGrad(GradientContext& c) {
  for (size_t i = 0; i < 2; ++i) {
    if (c.wants(i)) {
      c.SetInputGrad(i, c.ReduceTo(c.dy(), c.type(c.input(i)), fmt::format(".{}", i)));
    }
  }
}

void MulGrad(GradientContext& c) {
  for (size_t i = 0; i < 2; ++i) {
    if (!c.wants(i)) continue;
    const std::string suffix = fmt::format(".{}", i);
    ValueId product = c.EmitOne(OpKind::kMul, {c.dy(), c.input(1 - i)}, {}, suffix);
    c.SetInputGrad(i, c.ReduceTo(product, c.type(c.input(i)), suffix));
  }
}

// -g as 0 - g: the IR has no negation op, and the zero is a one-element fill
// that sub broadcasts. g's shape and layout carry over to the result.
ValueId Negate(GradientContext& c, ValueId g, const std::string& suffix) {
  const ValueId zero =
      c.EmitOne(OpKind::kFill, {}, {{"shape", IntList{}}, {"value", 0.0}}, suffix + ".zero");
  return c.EmitOne(OpKind::kSub, {zero, g}, {}, suffix + ".negate");
}

// y = a - b: da = dy, db = -dy, each summed over its broadcast axes. b's
// gradient is negated after the sum, where it has b's (often smaller) size.
void SubGrad(GradientContext& c) {
  if (c.wants(0)) c.SetInputGrad(0, c.ReduceTo(c.dy(), c.type(c.input(0)), ".0"));
  if (c.wants(1)) {
    c.SetInputGrad(1, Negate(c, c.ReduceTo(c.dy(), c.type(c.input(1)), ".1"), ".1"));
  }
}

// y = a / b: da = dy / b and db = -dy·a/b² = -(dy / b)·y, so both share dy / b
// and the rule saves b, and y only when b needs a gradient. y rather than a:
// the consumer of y often saves it anyway, and a would take a third product.
void DivGrad(GradientContext& c) {
  const ValueId dy_over_b = c.EmitOne(OpKind::kDiv, {c.dy(), c.input(1)}, {}, ".0");
  if (c.wants(0)) c.SetInputGrad(0, c.ReduceTo(dy_over_b, c.type(c.input(0)), ".0"));
  if (c.wants(1)) {
    const ValueId product = c.EmitOne(OpKind::kMul, {dy_over_b, c.output(0)}, {}, ".1");
    c.SetInputGrad(1, Negate(c, c.ReduceTo(product, c.type(c.input(1)), ".1"), ".1"));
  }
}

void ConcatGrad(GradientContext& c) {
  const int64_t rank = c.type(c.output(0)).rank();
  int64_t axis = c.node().attrs.Int("axis");
  if (axis < 0) axis += rank;
  int64_t offset = 0;
  for (size_t i = 0; i < c.node().inputs.size(); ++i) {
    const int64_t extent = c.type(c.input(i)).shape[static_cast<size_t>(axis)];
    if (c.wants(i)) {
      c.SetInputGrad(i, c.EmitOne(OpKind::kSlice, {c.dy()},
                                  {{"axes", IntList{axis}},
                                   {"starts", IntList{offset}},
                                   {"ends", IntList{offset + extent}}},
                                  fmt::format(".{}", i)));
    }
    offset += extent;
  }
}

void MatMulGrad(GradientContext& c) {
  const AttrMap& attrs = c.node().attrs;
  const bool ta = attrs.GetBool("transpose_a", false).value_or(false);
  const bool tb = attrs.GetBool("transpose_b", false).value_or(false);
  const double alpha = attrs.GetFloat("alpha", 1.0).value_or(1.0);
  const ValueId a = c.input(0);
  const ValueId b = c.input(1);
  const ValueId dy = c.dy();
  auto matmul = [&](ValueId lhs, ValueId rhs, bool t_lhs, bool t_rhs, const char* suffix) {
    return c.EmitOne(OpKind::kMatMul, {lhs, rhs},
                     {{"transpose_a", t_lhs}, {"transpose_b", t_rhs}, {"alpha", alpha}}, suffix);
  };
  // y = alpha·op(a)·op(b); each case writes the gradient in a's and b's storage.
  if (c.wants(0)) {
    ValueId da = !ta ? (!tb ? matmul(dy, b, false, true, ".a") : matmul(dy, b, false, false, ".a"))
                     : (!tb ? matmul(b, dy, false, true, ".a") : matmul(b, dy, true, true, ".a"));
    c.SetInputGrad(0, c.ReduceTo(da, c.type(a), ".a"));
  }
  if (c.wants(1)) {
    ValueId db = !tb ? (!ta ? matmul(a, dy, true, false, ".b") : matmul(a, dy, false, false, ".b"))
                     : (!ta ? matmul(dy, a, true, false, ".b") : matmul(dy, a, true, true, ".b"));
    c.SetInputGrad(1, c.ReduceTo(db, c.type(b), ".b"));
  }
}

void LinearGrad(GradientContext& c) {
  if (c.wants(0)) {
    const ir::TensorType& x = c.type(c.input(0));
    ValueId dy = c.dy();
    if (x.rank() == 1) {
      // matmul needs matrices: a single row [out] becomes [1,out] and back.
      dy = c.EmitOne(OpKind::kReshape, {dy}, {{"shape", IntList{1, c.type(dy).shape[0]}}},
                     ".data.rows");
    }
    const ValueId dx = c.EmitOne(OpKind::kMatMul, {dy, c.input(1)}, {}, ".data");
    if (x.rank() == 1) {
      c.SetInputGrad(0, c.EmitOne(OpKind::kReshape, {dx}, {{"shape", x.shape}}, ".data.reshape"));
    } else {
      c.SetInputGrad(0, c.ReduceTo(dx, x, ".data"));
    }
  }
  if (c.wants(1)) {
    c.SetInputGrad(1,
                   c.EmitOne(OpKind::kLinearBackwardWeight, {c.dy(), c.input(0)}, {}, ".weight"));
  }
  if (c.node().inputs.size() > 2 && c.wants(2)) {
    // The bias is added to every row: its gradient sums dy over the leading
    // axes, and is dy itself for a single row (x of rank 1).
    c.SetInputGrad(2, c.ReduceTo(c.dy(), c.type(c.input(2)), ".bias"));
  }
}

void ReshapeGrad(GradientContext& c) {
  const ir::TensorType& x = c.type(c.input(0));
  c.SetInputGrad(
      0, c.EmitOne(OpKind::kReshape, {c.dy()},
                   {{"shape", x.shape}, {"layout", std::string(ir::LayoutName(x.layout))}}, ""));
}

void TransposeGrad(GradientContext& c) {
  const IntList perm = c.node().attrs.Ints("perm");
  IntList inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  // dx carries x's layout tag, which a permutation back alone would drop.
  const std::string layout(ir::LayoutName(c.type(c.input(0)).layout));
  c.SetInputGrad(
      0, c.EmitOne(OpKind::kTranspose, {c.dy()}, {{"perm", inverse}, {"layout", layout}}, ""));
}

void ShapeOnlyGrad(GradientContext& c, OpKind backward) {
  c.SetInputGrad(0, c.EmitOne(backward, {c.dy()},
                              With(c.node().attrs, "input_shape", c.type(c.input(0)).shape), ""));
}

}  // namespace

bool HasGradientRule(OpKind op) {
  switch (op) {
    case OpKind::kConv2d:
    case OpKind::kBatchNorm:
    case OpKind::kRelu:
    case OpKind::kGelu:
    case OpKind::kSigmoid:
    case OpKind::kTanh:
    case OpKind::kLeakyRelu:
    case OpKind::kClip:
    case OpKind::kMaxPool:
    case OpKind::kAvgPool:
    case OpKind::kGlobalAvgPool:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kSub:
    case OpKind::kDiv:
    case OpKind::kConcat:
    case OpKind::kSlice:
    case OpKind::kResizeBilinear:
    case OpKind::kResizeNearest:
    case OpKind::kMatMul:
    case OpKind::kLinear:
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
    case OpKind::kCrossEntropyLoss:
    case OpKind::kLayerNorm:
    case OpKind::kEmbedding:
    case OpKind::kDropout:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kFlatten:
      return true;
    default:
      return false;
  }
}

absl::Status ApplyGradientRule(GradientContext& c) {
  const ir::Node& node = c.node();
  const AttrMap& attrs = node.attrs;
  switch (node.op) {
    case OpKind::kConv2d:
      Conv2dGrad(c);
      break;
    case OpKind::kBatchNorm:
      BatchNormGrad(c);
      break;
    case OpKind::kLayerNorm:
      LayerNormGrad(c);
      break;
    case OpKind::kRelu:
      UnaryFromOutput(c, OpKind::kReluBackward, {});  // relu's output says where it passed
      break;
    case OpKind::kSoftmax:
      UnaryFromOutput(c, OpKind::kSoftmaxBackward, Only(attrs, {"axis"}));
      break;
    case OpKind::kLogSoftmax:
      UnaryFromOutput(c, OpKind::kLogSoftmaxBackward, Only(attrs, {"axis"}));
      break;
    case OpKind::kGelu:
      c.SetInputGrad(0, c.EmitOne(OpKind::kGeluBackward, {c.dy(), c.input(0)},
                                  Only(attrs, {"approximate"}), ""));
      break;
    case OpKind::kSigmoid:
      UnaryFromOutput(c, OpKind::kSigmoidBackward, {});  // σ' = y·(1-y)
      break;
    case OpKind::kTanh:
      UnaryFromOutput(c, OpKind::kTanhBackward, {});  // tanh' = 1-y²
      break;
    case OpKind::kLeakyRelu:
      c.SetInputGrad(0, c.EmitOne(OpKind::kLeakyReluBackward, {c.dy(), c.input(0)},
                                  Only(attrs, {"alpha"}), ""));
      break;
    case OpKind::kClip:
      // From y, as relu: y is strictly inside (min, max) exactly where x is,
      // and the consumer of y (a convolution after ReLU6) saves it anyway.
      UnaryFromOutput(c, OpKind::kClipBackward, Only(attrs, {"min", "max"}));
      break;
    case OpKind::kMaxPool:
      // From x alone: the kernel finds each window's maximum again, so the
      // pooled output need not be kept for it (its bytes at a ResNet's stem
      // are a quarter of the stem's).
      c.SetInputGrad(0, c.EmitOne(OpKind::kMaxPoolBackward, {c.dy(), c.input(0)}, attrs, ""));
      break;
    case OpKind::kAvgPool:
      ShapeOnlyGrad(c, OpKind::kAvgPoolBackward);
      break;
    case OpKind::kGlobalAvgPool:
      ShapeOnlyGrad(c, OpKind::kGlobalAvgPoolBackward);
      break;
    case OpKind::kSlice:
      ShapeOnlyGrad(c, OpKind::kSliceBackward);
      break;
    case OpKind::kResizeBilinear:
      c.SetInputGrad(0, c.EmitOne(OpKind::kResizeBilinearBackward, {c.dy()},
                                  With(Only(attrs, {"align_corners"}), "input_shape",
                                       c.type(c.input(0)).shape),
                                  ""));
      break;
    case OpKind::kResizeNearest:
      c.SetInputGrad(0, c.EmitOne(OpKind::kResizeNearestBackward, {c.dy()},
                                  {{"input_shape", c.type(c.input(0)).shape}}, ""));
      break;
    case OpKind::kAdd:
      AddGrad(c);
      break;
    case OpKind::kSub:
      SubGrad(c);
      break;
    case OpKind::kMul:
      MulGrad(c);
      break;
    case OpKind::kDiv:
      DivGrad(c);
      break;
    case OpKind::kConcat:
      ConcatGrad(c);
      break;
    case OpKind::kMatMul:
      MatMulGrad(c);
      break;
    case OpKind::kLinear:
      LinearGrad(c);
      break;
    case OpKind::kCrossEntropyLoss:
      c.SetInputGrad(0, c.EmitOne(OpKind::kCrossEntropyLossBackward,
                                  {c.dy(), c.input(0), c.input(1)}, attrs, ""));
      break;
    case OpKind::kEmbedding:
      c.SetInputGrad(0, c.EmitOne(OpKind::kEmbeddingBackward, {c.dy(), c.input(1)},
                                  {{"num_embeddings", c.type(c.input(0)).shape[0]}}, ""));
      break;
    case OpKind::kDropout:
      // The mask is a function of the seed: nothing is saved.
      c.SetInputGrad(0,
                     c.EmitOne(OpKind::kDropoutBackward, {c.dy()}, Only(attrs, {"p", "seed"}), ""));
      break;
    case OpKind::kReshape:
    case OpKind::kFlatten:
      ReshapeGrad(c);
      break;
    case OpKind::kTranspose:
      TransposeGrad(c);
      break;
    default:
      return absl::UnimplementedError(
          fmt::format("node '{}': op {} has no gradient rule", node.name, ir::OpName(node.op)));
  }
  return c.status();
}

}  // namespace spillway::autodiff
