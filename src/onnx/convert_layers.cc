// Converters of the ops that compute: convolution, normalization, pooling,
// resizing, activations (GELU from its erf pattern), element-wise
// arithmetic, matrix products, softmax and dropout.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "onnx/converter.h"
#include "support/status_macros.h"

namespace spillway::onnx::internal {
namespace {

using ::onnx::NodeProto;
using ::onnx::TensorProto;

// Defines the node's output as `op` over its data input 0, in x's layout.
ConvertResult Unary(Importer& importer, const NodeProto& node, ir::OpKind op,
                    ir::AttrMap attrs = {}) {
  ASSIGN_OR_RETURN(const ir::ValueId x, importer.Data(node, 0));
  ASSIGN_OR_RETURN(const ir::ValueId y, importer.AddOp(node, op, {x}, std::move(attrs)));
  importer.Define(node.output(0), y, importer.IsNhwc(node, 0));
  return std::nullopt;
}

// "auto_pad" other than explicit pads is refused with its value.
std::optional<Unsupported> RefuseAutoPad(const NodeProto& node) {
  const std::string auto_pad = StringAttr(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET" || auto_pad == "VALID") return std::nullopt;
  return Refuse(fmt::format("auto_pad {} is not supported; export with explicit pads", auto_pad));
}

ConvertResult ConvertConv(Importer& importer, const NodeProto& node) {
  if (!importer.IsNhwc(node, 0)) {
    return Refuse("only 2-D convolutions over NCHW activations are supported");
  }
  const Entry& weight = *importer.Input(node, 1);
  if (!weight.constant || !weight.constant->is_float || weight.constant->shape.size() != 4) {
    return Refuse("the weight must be a 4-D float initializer or constant");
  }
  if (std::optional<Unsupported> refusal = RefuseAutoPad(node)) return refusal;
  // The weight is a parameter in OHWI order, named as in the file.
  const Constant& w = *weight.constant;
  const int64_t o = w.shape[0], c = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  ir::ValueId w_value = weight.value;
  if (w_value == ir::kInvalidValue) {
    std::vector<float> ohwi(w.floats.size());
    for (int64_t oi = 0; oi < o; ++oi) {
      for (int64_t ci = 0; ci < c; ++ci) {
        for (int64_t h = 0; h < kh; ++h) {
          for (int64_t x = 0; x < kw; ++x) {
            ohwi[static_cast<size_t>(((oi * kh + h) * kw + x) * c + ci)] =
                w.floats[static_cast<size_t>(((oi * c + ci) * kh + h) * kw + x)];
          }
        }
      }
    }
    w_value = importer.Materialize(node.input(1), {o, kh, kw, c}, ohwi, /*ohwi=*/true);
  } else if (importer.graph().value(w_value).type.shape != ir::Shape{o, kh, kw, c}) {
    return Refuse("the weight is shared with a node that reads it in another layout");
  }
  std::vector<ir::ValueId> inputs = {importer.Input(node, 0)->value, w_value};
  if (importer.Input(node, 2)) {
    ASSIGN_OR_RETURN(const ir::ValueId bias, importer.Data(node, 2));
    inputs.push_back(bias);
  }
  ir::AttrMap attrs;
  attrs.Set("strides", IntsAttr(node, "strides").value_or(ir::IntList{1, 1}));
  attrs.Set("dilations", IntsAttr(node, "dilations").value_or(ir::IntList{1, 1}));
  attrs.Set("pads", IntsAttr(node, "pads").value_or(ir::IntList{0, 0, 0, 0}));
  attrs.Set("groups", IntAttr(node, "group", 1));
  ASSIGN_OR_RETURN(const ir::ValueId y,
                   importer.AddOp(node, ir::OpKind::kConv2d, inputs, std::move(attrs)));
  importer.Define(node.output(0), y, true);
  return std::nullopt;
}

ConvertResult ConvertBatchNorm(Importer& importer, const NodeProto& node) {
  const bool training =
      importer.opset() >= 14 ? IntAttr(node, "training_mode", 0) != 0 : node.output_size() > 1;
  if (!importer.IsNhwc(node, 0) && importer.InputShape(node, 0).size() != 2) {
    return Refuse("batch normalization over 4-D or 2-D activations only");
  }
  // Data, not the entry's value: a 2-D input may be an initializer not yet read.
  ASSIGN_OR_RETURN(const ir::ValueId x, importer.Data(node, 0));
  std::vector<ir::ValueId> inputs = {x};
  for (int i = 1; i <= 4; ++i) {
    // Scale and bias are trained; the running statistics are buffers.
    ASSIGN_OR_RETURN(
        const ir::ValueId v,
        importer.Data(node, i, i <= 2 ? ir::ValueKind::kParameter : ir::ValueKind::kBuffer));
    inputs.push_back(v);
  }
  ir::AttrMap attrs;
  attrs.Set("training", training);
  attrs.Set("epsilon", static_cast<double>(FloatAttr(node, "epsilon", 1e-5f)));
  // ONNX keeps `momentum` of the old statistics, PyTorch and the IR take it of the new.
  attrs.Set("momentum", 1.0 - static_cast<double>(FloatAttr(node, "momentum", 0.9f)));
  ASSIGN_OR_RETURN(const ir::NodeId id,
                   importer.AddNode(node, ir::OpKind::kBatchNorm, inputs, std::move(attrs)));
  const ir::Node& bn = importer.graph().node(id);
  importer.Define(node.output(0), bn.outputs[0], importer.IsNhwc(node, 0));
  if (training) {
    // ONNX's running mean and variance are the IR's outputs 3 and 4.
    for (int i = 1; i <= 2 && i < node.output_size(); ++i) {
      if (!node.output(i).empty()) {
        importer.Define(node.output(i), bn.outputs[static_cast<size_t>(i + 2)], false);
      }
    }
    importer.MarkOutputsUnavailable(
        node, 3, "reads batch normalization's saved statistics, which are not imported");
  }
  return std::nullopt;
}

// A [D] view of a layer norm's scale or bias, whatever its shape of D elements.
absl::StatusOr<ir::ValueId> AsVector(Importer& importer, const NodeProto& node, int index,
                                     int64_t width) {
  ASSIGN_OR_RETURN(const ir::ValueId value, importer.Data(node, index));
  const ir::Shape shape = importer.InputShape(node, index);
  if (ir::NumElements(shape) != width) {
    return absl::InvalidArgumentError(
        fmt::format("input {} {} does not have the {} elements of the normalized axes", index,
                    ir::ShapeToString(shape), width));
  }
  if (shape == ir::Shape{width}) return value;
  ir::AttrMap attrs;
  attrs.Set("shape", ir::IntList{width});
  return importer.AddOp(node, ir::OpKind::kReshape, {value}, std::move(attrs),
                        fmt::format(".in{}_flat", index));
}

// LayerNormalization normalizes over the axes from `axis` on, in ONNX order:
// the IR's layer_norm over the last axis, after a reshape merging those axes
// (and a transpose to NCHW order for an NHWC activation).
ConvertResult ConvertLayerNorm(Importer& importer, const NodeProto& node) {
  const ir::Shape shape = importer.InputShape(node, 0);
  const auto rank = static_cast<int64_t>(shape.size());
  int64_t axis = IntAttr(node, "axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("axis out of range");
  const ir::Shape outer(shape.begin(), shape.begin() + axis);
  const int64_t width = *ir::NumElements(ir::Shape(shape.begin() + axis, shape.end()));
  ASSIGN_OR_RETURN(ir::ValueId x, importer.DataInOnnxOrder(node, 0));
  ir::Shape merged = outer;
  merged.push_back(width);
  if (merged != shape) {
    ir::AttrMap attrs;
    attrs.Set("shape", merged);
    ASSIGN_OR_RETURN(x,
                     importer.AddOp(node, ir::OpKind::kReshape, {x}, std::move(attrs), ".merge"));
  }
  ASSIGN_OR_RETURN(const ir::ValueId gamma, AsVector(importer, node, 1, width));
  ir::ValueId beta = ir::kInvalidValue;
  if (importer.Input(node, 2)) {
    ASSIGN_OR_RETURN(beta, AsVector(importer, node, 2, width));
  } else {
    // The IR's layer norm always adds a bias: a zero buffer, never trained.
    beta = importer.AddConstantBuffer(importer.NodeName(node) + ".zero_bias", {width},
                                      std::vector<float>(static_cast<size_t>(width), 0.0f));
  }
  ir::AttrMap attrs;
  attrs.Set("epsilon", static_cast<double>(FloatAttr(node, "epsilon", 1e-5f)));
  ASSIGN_OR_RETURN(ir::ValueId y, importer.AddOp(node, ir::OpKind::kLayerNorm, {x, gamma, beta},
                                                 std::move(attrs)));
  if (merged != shape) {
    ir::AttrMap split;
    split.Set("shape", shape);
    ASSIGN_OR_RETURN(y,
                     importer.AddOp(node, ir::OpKind::kReshape, {y}, std::move(split), ".split"));
  }
  RETURN_IF_ERROR(importer.DefineFromOnnxOrder(node, node.output(0), y));
  importer.MarkOutputsUnavailable(
      node, 1, "reads layer normalization's mean or inverse deviation, which are not imported");
  return std::nullopt;
}

ConvertResult ConvertPool(Importer& importer, const NodeProto& node) {
  if (!importer.IsNhwc(node, 0))
    return Refuse("only 2-D pooling over NCHW activations is supported");
  if (IntAttr(node, "ceil_mode", 0) != 0) return Refuse("ceil_mode=1 is not supported");
  if (std::optional<Unsupported> refusal = RefuseAutoPad(node)) return refusal;
  if (const std::optional<ir::IntList> d = IntsAttr(node, "dilations");
      d && *d != ir::IntList{1, 1}) {
    return Refuse("dilated pooling is not supported");
  }
  importer.MarkOutputsUnavailable(node, 1, "reads MaxPool's indices, which are not supported");
  const std::optional<ir::IntList> kernel = IntsAttr(node, "kernel_shape");
  if (!kernel) return absl::InvalidArgumentError("kernel_shape is missing");
  ir::AttrMap attrs;
  attrs.Set("kernel", *kernel);
  attrs.Set("strides", IntsAttr(node, "strides").value_or(ir::IntList{1, 1}));
  attrs.Set("pads", IntsAttr(node, "pads").value_or(ir::IntList{0, 0, 0, 0}));
  ir::OpKind op = ir::OpKind::kMaxPool;
  if (node.op_type() == "AveragePool") {
    op = ir::OpKind::kAvgPool;
    attrs.Set("count_include_pad", IntAttr(node, "count_include_pad", 0) != 0);
  }
  return Unary(importer, node, op, std::move(attrs));
}

ConvertResult ConvertGlobalAveragePool(Importer& importer, const NodeProto& node) {
  if (!importer.IsNhwc(node, 0))
    return Refuse("only 2-D pooling over NCHW activations is supported");
  return Unary(importer, node, ir::OpKind::kGlobalAvgPool);
}

// Resize of an NCHW activation, as PyTorch exports F.interpolate: bilinear
// (align_corners false or true) and nearest (floor of dst·in/out).
ConvertResult ConvertResize(Importer& importer, const NodeProto& node) {
  if (!importer.IsNhwc(node, 0)) return Refuse("only resizing of NCHW activations is supported");
  const ir::Shape x = importer.InputShape(node, 0);
  // Opset 11 and 12 have (X, roi, scales[, sizes]); 13 on makes all but X optional.
  const Constant* scales = importer.ConstantInput(node, 2);
  const Constant* sizes = importer.ConstantInput(node, 3);
  if ((importer.Input(node, 2) && !scales) || (importer.Input(node, 3) && !sizes)) {
    return Refuse("scales and sizes must be known constants");
  }
  if (scales && scales->size() == 0) scales = nullptr;
  int64_t out_h = 0, out_w = 0;
  if (sizes && sizes->size() > 0) {
    if (sizes->is_float || sizes->size() != 4 || sizes->ints[0] != x[0] || sizes->ints[1] != x[1]) {
      return Refuse("sizes must be 4 integers that keep N and C");
    }
    out_h = sizes->ints[2];
    out_w = sizes->ints[3];
  } else if (scales) {
    if (!scales->is_float || scales->size() != 4 || scales->floats[0] != 1.0f ||
        scales->floats[1] != 1.0f) {
      return Refuse("scales must be 4 floats that keep N and C");
    }
    // The IR resizes by in/out; a scale that gives a fractional size would
    // map coordinates by a different factor than ONNX's 1/scale.
    const double h = static_cast<double>(x[2]) * static_cast<double>(scales->floats[2]);
    const double w = static_cast<double>(x[3]) * static_cast<double>(scales->floats[3]);
    // Written so that NaN fails too; the bound keeps the conversion defined.
    constexpr double kLargestExtent = 0x1p31;
    if (!(h >= 1 && w >= 1 && h <= kLargestExtent && w <= kLargestExtent)) {
      return absl::InvalidArgumentError(
          fmt::format("Resize scales {} and {} give an output of {}x{}", scales->floats[2],
                      scales->floats[3], h, w));
    }
    if (h != std::floor(h) || w != std::floor(w)) {
      return Refuse("scales that do not give whole output sizes are not supported");
    }
    out_h = static_cast<int64_t>(h);
    out_w = static_cast<int64_t>(w);
  } else {
    return absl::InvalidArgumentError("Resize needs scales or sizes");
  }
  if (out_h <= 0 || out_w <= 0) {
    return absl::InvalidArgumentError(fmt::format("Resize to {}x{}", out_h, out_w));
  }
  const std::string mode = StringAttr(node, "mode", "nearest");
  const std::string transform = StringAttr(node, "coordinate_transformation_mode", "half_pixel");
  ir::AttrMap attrs;
  attrs.Set("size", ir::IntList{out_h, out_w});
  if (mode == "nearest") {
    const std::string rounding = StringAttr(node, "nearest_mode", "round_prefer_floor");
    if (transform != "asymmetric" || rounding != "floor") {
      return Refuse(fmt::format(
          "nearest resize with coordinate_transformation_mode '{}' and nearest_mode '{}'; only "
          "'asymmetric' with 'floor' (PyTorch's nearest) is supported",
          transform, rounding));
    }
    return Unary(importer, node, ir::OpKind::kResizeNearest, std::move(attrs));
  }
  if (mode != "linear") return Refuse(fmt::format("resize mode '{}' is not supported", mode));
  // half_pixel is PyTorch's align_corners=False; pytorch_half_pixel differs
  // from it only where an output extent is 1.
  const bool half_pixel =
      transform == "half_pixel" || (transform == "pytorch_half_pixel" && out_h > 1 && out_w > 1);
  if (!half_pixel && transform != "align_corners") {
    return Refuse(
        fmt::format("linear resize with coordinate_transformation_mode '{}' is not "
                    "supported (half_pixel and align_corners are)",
                    transform));
  }
  attrs.Set("align_corners", transform == "align_corners");
  return Unary(importer, node, ir::OpKind::kResizeBilinear, std::move(attrs));
}

ConvertResult ConvertRelu(Importer& importer, const NodeProto& node) {
  return Unary(importer, node, ir::OpKind::kRelu);
}
ConvertResult ConvertSigmoid(Importer& importer, const NodeProto& node) {
  return Unary(importer, node, ir::OpKind::kSigmoid);
}
ConvertResult ConvertTanh(Importer& importer, const NodeProto& node) {
  return Unary(importer, node, ir::OpKind::kTanh);
}
ConvertResult ConvertLeakyRelu(Importer& importer, const NodeProto& node) {
  ir::AttrMap attrs;
  attrs.Set("alpha", static_cast<double>(FloatAttr(node, "alpha", 0.01f)));
  return Unary(importer, node, ir::OpKind::kLeakyRelu, std::move(attrs));
}

// Clip (PyTorch's ReLU6 and hardtanh): bounds from known inputs, each optional.
ConvertResult ConvertClip(Importer& importer, const NodeProto& node) {
  ir::AttrMap attrs;
  for (const auto& [index, name] : {std::pair<int, const char*>{1, "min"}, {2, "max"}}) {
    if (!importer.Input(node, index)) continue;
    const Constant* bound = importer.ConstantInput(node, index);
    if (bound == nullptr || !bound->Scalar()) {
      return Refuse(fmt::format("the {} must be a known scalar", name));
    }
    attrs.Set(name, *bound->Scalar());
  }
  return Unary(importer, node, ir::OpKind::kClip, std::move(attrs));
}

// clip(alpha·x + beta, 0, 1) over data input 0, as HardSigmoid defines it.
absl::StatusOr<ir::ValueId> HardSigmoid(Importer& importer, const NodeProto& node, double alpha,
                                        double beta) {
  ASSIGN_OR_RETURN(const ir::ValueId x, importer.Data(node, 0));
  const std::string name = importer.NodeName(node);
  const ir::ValueId a =
      importer.AddConstantBuffer(name + ".alpha", {}, {static_cast<float>(alpha)});
  const ir::ValueId b = importer.AddConstantBuffer(name + ".beta", {}, {static_cast<float>(beta)});
  ASSIGN_OR_RETURN(ir::ValueId y, importer.AddOp(node, ir::OpKind::kMul, {x, a}, {}, ".scale"));
  ASSIGN_OR_RETURN(y, importer.AddOp(node, ir::OpKind::kAdd, {y, b}, {}, ".shift"));
  ir::AttrMap bounds;
  bounds.Set("min", 0.0);
  bounds.Set("max", 1.0);
  return importer.AddOp(node, ir::OpKind::kClip, {y}, std::move(bounds));
}

ConvertResult ConvertHardSigmoid(Importer& importer, const NodeProto& node) {
  ASSIGN_OR_RETURN(const ir::ValueId y, HardSigmoid(importer, node, FloatAttr(node, "alpha", 0.2f),
                                                    FloatAttr(node, "beta", 0.5f)));
  importer.Define(node.output(0), y, importer.IsNhwc(node, 0));
  return std::nullopt;
}

// HardSwish: x · HardSigmoid(x) with alpha 1/6 and beta 1/2.
ConvertResult ConvertHardSwish(Importer& importer, const NodeProto& node) {
  ASSIGN_OR_RETURN(const ir::ValueId gate, HardSigmoid(importer, node, 1.0 / 6.0, 0.5));
  ASSIGN_OR_RETURN(const ir::ValueId x, importer.Data(node, 0));
  ASSIGN_OR_RETURN(const ir::ValueId y,
                   importer.AddOp(node, ir::OpKind::kMul, {x, gate}, {}, ".gate"));
  importer.Define(node.output(0), y, importer.IsNhwc(node, 0));
  return std::nullopt;
}

// Operand `index` of a binary op whose other operand is an NHWC activation:
// one element broadcasts as it is; anything else is aligned to rank 4 in
// ONNX order (leading 1s) and brought to NHWC like the activation.
absl::StatusOr<ir::ValueId> BroadcastOperand(Importer& importer, const NodeProto& node, int index) {
  ASSIGN_OR_RETURN(const ir::ValueId value, importer.Data(node, index));
  if (importer.IsNhwc(node, index)) return value;
  ir::Shape shape = importer.InputShape(node, index);
  if (ir::NumElements(shape) == 1) return value;
  if (shape.size() > 4) return absl::InvalidArgumentError("broadcasting a rank > 4 operand");
  shape.insert(shape.begin(), 4 - shape.size(), 1);
  // C and H·W cannot both exceed 1 without a transpose; a bias [C,1,1] or a
  // mask [1,H,W] reshapes.
  if (shape[1] != 1 && shape[2] * shape[3] != 1) {
    return absl::UnimplementedError(
        fmt::format("broadcasting {} against an NCHW activation is not supported",
                    ir::ShapeToString(importer.InputShape(node, index))));
  }
  ir::AttrMap attrs;
  attrs.Set("shape", NchwToNhwc(shape));
  attrs.Set("layout", std::string("nhwc"));
  return importer.AddOp(node, ir::OpKind::kReshape, {value}, std::move(attrs),
                        fmt::format(".in{}_nhwc", index));
}

ConvertResult ConvertBinary(Importer& importer, const NodeProto& node) {
  static const absl::flat_hash_map<std::string, ir::OpKind> kOps = {{"Add", ir::OpKind::kAdd},
                                                                    {"Sub", ir::OpKind::kSub},
                                                                    {"Mul", ir::OpKind::kMul},
                                                                    {"Div", ir::OpKind::kDiv}};
  const bool nhwc = importer.IsNhwc(node, 0) || importer.IsNhwc(node, 1);
  ir::ValueId a = ir::kInvalidValue, b = ir::kInvalidValue;
  if (nhwc) {
    ASSIGN_OR_RETURN(a, BroadcastOperand(importer, node, 0));
    ASSIGN_OR_RETURN(b, BroadcastOperand(importer, node, 1));
  } else {
    ASSIGN_OR_RETURN(a, importer.Data(node, 0));
    ASSIGN_OR_RETURN(b, importer.Data(node, 1));
  }
  ASSIGN_OR_RETURN(const ir::ValueId y, importer.AddOp(node, kOps.at(node.op_type()), {a, b}, {}));
  importer.Define(node.output(0), y, nhwc);
  return std::nullopt;
}

// Gemm (2-D) and MatMul (any rank, batch axes broadcast). A 4-D activation
// takes part in ONNX order (a channels-last Linear, as in ConvNeXt, reads
// [N,H,W,C]) and a 4-D product becomes an NHWC activation again.
ConvertResult ConvertMatrixProduct(Importer& importer, const NodeProto& node) {
  const bool gemm = node.op_type() == "Gemm";
  const bool trans_a = IntAttr(node, "transA", 0) != 0;
  const bool trans_b = IntAttr(node, "transB", 0) != 0;
  const float alpha = FloatAttr(node, "alpha", 1.0f);
  const float beta = FloatAttr(node, "beta", 1.0f);
  const bool has_c = gemm && importer.Input(node, 2) != nullptr;
  if (has_c && beta != 1.0f) return Refuse("Gemm with beta != 1 is not supported");
  ASSIGN_OR_RETURN(const ir::ValueId a, importer.DataInOnnxOrder(node, 0));
  ASSIGN_OR_RETURN(const ir::ValueId b, importer.DataInOnnxOrder(node, 1));
  const bool c_is_vector = has_c && importer.InputShape(node, 2).size() == 1;
  ir::ValueId y = ir::kInvalidValue;
  if (gemm && trans_b && !trans_a && alpha == 1.0f && (!has_c || c_is_vector)) {
    // y = a·bᵀ + c with b [out, in]: a linear layer.
    std::vector<ir::ValueId> inputs = {a, b};
    if (has_c) {
      ASSIGN_OR_RETURN(const ir::ValueId c, importer.Data(node, 2));
      inputs.push_back(c);
    }
    ASSIGN_OR_RETURN(y, importer.AddOp(node, ir::OpKind::kLinear, inputs, {}));
  } else {
    ir::AttrMap attrs;
    if (gemm) {
      attrs.Set("transpose_a", trans_a);
      attrs.Set("transpose_b", trans_b);
      attrs.Set("alpha", static_cast<double>(alpha));
    }
    ASSIGN_OR_RETURN(y, importer.AddOp(node, ir::OpKind::kMatMul, {a, b}, std::move(attrs),
                                       has_c ? ".matmul" : ""));
    if (has_c) {
      ASSIGN_OR_RETURN(const ir::ValueId c, importer.Data(node, 2));
      ASSIGN_OR_RETURN(y, importer.AddOp(node, ir::OpKind::kAdd, {y, c}, {}));
    }
  }
  RETURN_IF_ERROR(importer.DefineFromOnnxOrder(node, node.output(0), y));
  return std::nullopt;
}

// Pad: only its no-op form, all pads 0, which exporters emit before some
// pools (DenseNet's transitions); convolutions and pools carry their own pads.
ConvertResult ConvertPad(Importer& importer, const NodeProto& node) {
  std::optional<ir::IntList> pads = IntsAttr(node, "pads");  // before opset 11
  if (importer.opset() >= 11) {
    const Constant* given = importer.ConstantInput(node, 1);
    if (given == nullptr || given->is_float) return Refuse("the pads must be a known constant");
    pads = given->ints;
  }
  if (!pads || std::any_of(pads->begin(), pads->end(), [](int64_t p) { return p != 0; })) {
    return Refuse(
        "padding other than all zeros is not supported (convolutions and pools "
        "take their own pads)");
  }
  RETURN_IF_ERROR(importer.Alias(node.output(0), node.input(0)));
  return std::nullopt;
}

ConvertResult ConvertSoftmax(Importer& importer, const NodeProto& node) {
  const auto rank = static_cast<int64_t>(importer.InputShape(node, 0).size());
  int64_t axis = IntAttr(node, "axis", importer.opset() >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("axis out of range");
  // Before opset 13 the input is coerced to 2-D at `axis`: the same as a
  // softmax over one axis only when that axis is the last.
  if (importer.opset() < 13 && axis != rank - 1) {
    return Refuse("before opset 13, softmax is supported over the last axis only");
  }
  if (importer.IsNhwc(node, 0)) axis = NhwcAxis(axis);
  ir::AttrMap attrs;
  attrs.Set("axis", axis);
  return Unary(importer, node,
               node.op_type() == "Softmax" ? ir::OpKind::kSoftmax : ir::OpKind::kLogSoftmax,
               std::move(attrs));
}

ConvertResult ConvertDropout(Importer& importer, const NodeProto& node) {
  double ratio = FloatAttr(node, "ratio", 0.5f);
  bool training = importer.opset() < 12;  // Dropout-10 is always training-mode in a training export
  if (importer.opset() >= 12) {
    if (importer.Input(node, 1)) {
      const Constant* r = importer.ConstantInput(node, 1);
      if (!r || !r->is_float || r->size() != 1) return Refuse("the ratio must be a constant");
      ratio = static_cast<double>(r->floats[0]);
    }
    if (importer.Input(node, 2)) {
      const Constant* t = importer.ConstantInput(node, 2);
      if (!t || t->size() != 1) return Refuse("training_mode must be a constant");
      training = *t->Scalar() != 0.0;
    }
  }
  importer.MarkOutputsUnavailable(node, 1, "reads Dropout's mask, which is not supported");
  if (!training || ratio == 0.0) {
    RETURN_IF_ERROR(importer.Alias(node.output(0), node.input(0)));
    return std::nullopt;
  }
  ir::AttrMap attrs;
  attrs.Set("p", ratio);
  attrs.Set("seed", importer.NextDropoutSeed());
  return Unary(importer, node, ir::OpKind::kDropout, std::move(attrs));
}

// ---- GELU from its erf pattern ----

// The nodes of a graph by what they produce and how often each name is read.
struct GraphIndex {
  absl::flat_hash_map<std::string, int> producer;
  absl::flat_hash_map<std::string, int> readers;      // graph outputs count as readers
  absl::flat_hash_map<std::string, int> sole_reader;  // name -> the node that reads it, if one
  absl::flat_hash_map<std::string, const TensorProto*> initializers;
};

GraphIndex IndexGraph(const ::onnx::GraphProto& graph) {
  GraphIndex index;
  for (int n = 0; n < graph.node_size(); ++n) {
    for (const std::string& out : graph.node(n).output()) index.producer[out] = n;
    for (const std::string& in : graph.node(n).input()) {
      if (++index.readers[in] == 1) {
        index.sole_reader[in] = n;
      } else {
        index.sole_reader.erase(in);
      }
    }
  }
  for (const ::onnx::ValueInfoProto& out : graph.output()) {
    ++index.readers[out.name()];
    index.sole_reader.erase(out.name());
  }
  for (const TensorProto& init : graph.initializer()) index.initializers[init.name()] = &init;
  return index;
}

// The value of a one-element Constant node output or initializer.
std::optional<double> ScalarNamed(const ::onnx::GraphProto& graph, const GraphIndex& index,
                                  const std::string& name) {
  const TensorProto* tensor = nullptr;
  if (auto it = index.producer.find(name); it != index.producer.end()) {
    const NodeProto& node = graph.node(it->second);
    if (node.op_type() != "Constant" || node.attribute_size() != 1 ||
        node.attribute(0).name() != "value") {
      return std::nullopt;
    }
    tensor = &node.attribute(0).t();
  } else if (auto init = index.initializers.find(name); init != index.initializers.end()) {
    tensor = init->second;
  }
  if (tensor == nullptr) return std::nullopt;
  int64_t count = 1;
  for (int64_t dim : tensor->dims()) count *= dim;
  if (count != 1) return std::nullopt;
  absl::StatusOr<Constant> c = ReadTensor(*tensor);
  if (!c.ok()) return std::nullopt;
  return c->Scalar();
}

bool Near(std::optional<double> value, double expected) {
  return value && std::abs(*value - expected) <= 1e-5 * std::abs(expected);
}

}  // namespace

absl::flat_hash_map<int, GeluPattern> FindGeluPatterns(const ::onnx::GraphProto& graph) {
  const GraphIndex index = IndexGraph(graph);
  // The node that alone reads `name` if it has type `type`, else -1.
  auto sole = [&](const std::string& name, std::string_view type) {
    auto it = index.sole_reader.find(name);
    if (it == index.sole_reader.end()) return -1;
    const NodeProto& node = graph.node(it->second);
    return node.op_type() == type && node.input_size() == 2 && node.output_size() == 1 ? it->second
                                                                                       : -1;
  };
  // The operand of binary `node` other than `name`.
  auto other = [&](int node, const std::string& name) -> const std::string& {
    const NodeProto& n = graph.node(node);
    return n.input(0) == name ? n.input(1) : n.input(0);
  };
  auto is_scalar = [&](const std::string& name, double value) {
    return Near(ScalarNamed(graph, index, name), value);
  };
  absl::flat_hash_map<int, GeluPattern> patterns;
  for (int e = 0; e < graph.node_size(); ++e) {
    const NodeProto& erf = graph.node(e);
    if (erf.op_type() != "Erf" || erf.input_size() != 1 || erf.output_size() != 1) continue;
    // x/√2 or x·(1/√2), read by nothing else.
    auto scaled = index.producer.find(erf.input(0));
    if (scaled == index.producer.end() || index.readers.at(erf.input(0)) != 1) continue;
    const NodeProto& scale = graph.node(scaled->second);
    if (scale.input_size() != 2) continue;
    const bool divides = scale.op_type() == "Div" && is_scalar(scale.input(1), std::sqrt(2.0));
    const bool multiplies =
        scale.op_type() == "Mul" &&
        (is_scalar(scale.input(1), std::sqrt(0.5)) || is_scalar(scale.input(0), std::sqrt(0.5)));
    if (!divides && !multiplies) continue;
    const std::string& x =
        divides || is_scalar(scale.input(1), std::sqrt(0.5)) ? scale.input(0) : scale.input(1);
    // 1 + erf(...)
    const int plus = sole(erf.output(0), "Add");
    if (plus < 0 || !is_scalar(other(plus, erf.output(0)), 1.0)) continue;
    const std::string& one_plus = graph.node(plus).output(0);
    GeluPattern pattern{x, {scaled->second, e, plus}};
    // Three association orders of x · 0.5 · (1 + erf): (x·(1+erf))·0.5,
    // (0.5·(1+erf))·x and (x·0.5)·(1+erf).
    const int m1 = sole(one_plus, "Mul");
    if (m1 < 0) continue;
    const std::string& factor = other(m1, one_plus);
    const std::string& m1_out = graph.node(m1).output(0);
    int last = -1;
    if (factor == x || is_scalar(factor, 0.5)) {
      const int m2 = sole(m1_out, "Mul");
      if (m2 >= 0 && (factor == x ? is_scalar(other(m2, m1_out), 0.5) : other(m2, m1_out) == x)) {
        pattern.interior.insert(m1);
        last = m2;
      }
    } else if (auto half = index.producer.find(factor);
               half != index.producer.end() && index.readers.at(factor) == 1) {
      const NodeProto& h = graph.node(half->second);
      if (h.op_type() == "Mul" && h.input_size() == 2 &&
          ((h.input(0) == x && is_scalar(h.input(1), 0.5)) ||
           (h.input(1) == x && is_scalar(h.input(0), 0.5)))) {
        pattern.interior.insert(half->second);
        last = m1;
      }
    }
    if (last >= 0) patterns[last] = std::move(pattern);
  }
  return patterns;
}

ConvertResult ConvertGelu(Importer& importer, const NodeProto& node, const std::string& x) {
  ASSIGN_OR_RETURN(const ir::ValueId value, importer.DataNamed(x));
  ir::AttrMap attrs;
  attrs.Set("approximate", std::string("none"));
  ASSIGN_OR_RETURN(const ir::ValueId y,
                   importer.AddOp(node, ir::OpKind::kGelu, {value}, std::move(attrs)));
  const Entry* entry = importer.Find(x);
  importer.Define(node.output(0), y, entry != nullptr && entry->nhwc);
  return std::nullopt;
}

void AddLayerConverters(ConverterTable& table) {
  table["Conv"] = {ConvertConv, 2};
  table["BatchNormalization"] = {ConvertBatchNorm, 5};
  table["LayerNormalization"] = {ConvertLayerNorm, 2};
  table["MaxPool"] = {ConvertPool, 1};
  table["AveragePool"] = {ConvertPool, 1};
  table["GlobalAveragePool"] = {ConvertGlobalAveragePool, 1};
  table["Resize"] = {ConvertResize, 1};
  table["Relu"] = {ConvertRelu, 1};
  table["LeakyRelu"] = {ConvertLeakyRelu, 1};
  table["Sigmoid"] = {ConvertSigmoid, 1};
  table["Tanh"] = {ConvertTanh, 1};
  table["Clip"] = {ConvertClip, 1};
  table["HardSigmoid"] = {ConvertHardSigmoid, 1};
  table["HardSwish"] = {ConvertHardSwish, 1};
  for (const char* type : {"Add", "Sub", "Mul", "Div"}) table[type] = {ConvertBinary, 2};
  table["Gemm"] = {ConvertMatrixProduct, 2};
  table["MatMul"] = {ConvertMatrixProduct, 2};
  table["Pad"] = {ConvertPad, 1};
  table["Softmax"] = {ConvertSoftmax, 1};
  table["LogSoftmax"] = {ConvertSoftmax, 1};
  table["Dropout"] = {ConvertDropout, 1};
}

}  // namespace spillway::onnx::internal
