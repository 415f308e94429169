#include "models/layers.h"

#include <utility>

#include "fmt/format.h"
#include "support/check.h"

namespace spillway::models {

using ir::AttrMap;
using ir::IntList;
using ir::kInvalidValue;
using ir::OpKind;
using ir::TensorType;
using ir::ValueId;

ValueId NetBuilder::AddInput(std::string name, TensorType type, ir::ValueKind kind) {
  if (!ok()) return kInvalidValue;
  if (!type.Bytes().has_value()) {
    // Stop here: ops would otherwise see an input whose size cannot be counted.
    status_ = absl::InvalidArgumentError(
        fmt::format("{} '{}' of type {} has more bytes than a 64-bit count can hold",
                    ir::ValueKindName(kind), name, ir::TypeToString(type)));
    return kInvalidValue;
  }
  switch (kind) {
    case ir::ValueKind::kParameter:
      return builder_.Parameter(std::move(name), std::move(type));
    case ir::ValueKind::kBuffer:
      return builder_.Buffer(std::move(name), std::move(type));
    default:
      return builder_.Input(std::move(name), std::move(type));
  }
}

ValueId NetBuilder::Input(std::string name, TensorType type) {
  return AddInput(std::move(name), std::move(type), ir::ValueKind::kInput);
}

ValueId NetBuilder::Parameter(std::string name, TensorType type) {
  return AddInput(std::move(name), std::move(type), ir::ValueKind::kParameter);
}

ValueId NetBuilder::Buffer(std::string name, TensorType type) {
  return AddInput(std::move(name), std::move(type), ir::ValueKind::kBuffer);
}

ValueId NetBuilder::Op(OpKind op, std::vector<ValueId> inputs, AttrMap attrs, std::string name) {
  if (!ok()) return kInvalidValue;
  return builder_.Op(op, std::move(inputs), std::move(attrs), std::move(name));
}

void NetBuilder::Output(ValueId value) {
  if (ok()) builder_.Output(value);
}

const TensorType& NetBuilder::type(ValueId value) const {
  SPILLWAY_CHECK(value != kInvalidValue, "type of a value that failed to build");
  return builder_.type(value);
}

int64_t NetBuilder::LastDim(ValueId value) const {
  const TensorType& t = type(value);
  SPILLWAY_CHECK(t.rank() > 0, "last dimension of a scalar");
  return t.shape.back();
}

ValueId NetBuilder::Conv2d(const std::string& name, ValueId x, int64_t out_channels, int64_t kernel,
                           const ConvOptions& options) {
  if (!ok()) return kInvalidValue;
  const int64_t in_channels = LastDim(x);
  ValueId weight = Parameter(fmt::format("{}.weight", name),
                             ir::F32({out_channels, kernel, kernel, in_channels}));
  std::vector<ValueId> inputs = {x, weight};
  if (options.bias)
    inputs.push_back(Parameter(fmt::format("{}.bias", name), ir::F32({out_channels})));
  const int64_t pad = options.dilation * (kernel - 1) / 2;
  AttrMap attrs = {
      {"strides", IntList{options.stride, options.stride}},
      {"pads", options.pads.value_or(IntList{pad, pad, pad, pad})},
      {"dilations", IntList{options.dilation, options.dilation}},
  };
  return Op(OpKind::kConv2d, std::move(inputs), std::move(attrs), name);
}

ValueId NetBuilder::BatchNorm(const std::string& name, ValueId x) {
  if (!ok()) return kInvalidValue;
  const int64_t channels = LastDim(x);
  ValueId gamma = Parameter(fmt::format("{}.weight", name), ir::F32({channels}));
  ValueId beta = Parameter(fmt::format("{}.bias", name), ir::F32({channels}));
  ValueId running_mean = Buffer(fmt::format("{}.running_mean", name), ir::F32({channels}));
  ValueId running_var = Buffer(fmt::format("{}.running_var", name), ir::F32({channels}));
  return Op(OpKind::kBatchNorm, {x, gamma, beta, running_mean, running_var},
            {{"training", true}, {"momentum", 0.1}, {"epsilon", 1e-5}}, name);
}

ValueId NetBuilder::Linear(const std::string& name, ValueId x, int64_t out_features, bool bias) {
  if (!ok()) return kInvalidValue;
  ValueId weight = Parameter(fmt::format("{}.weight", name), ir::F32({out_features, LastDim(x)}));
  std::vector<ValueId> inputs = {x, weight};
  if (bias) inputs.push_back(Parameter(fmt::format("{}.bias", name), ir::F32({out_features})));
  return Op(OpKind::kLinear, std::move(inputs), {}, name);
}

ValueId NetBuilder::LayerNorm(const std::string& name, ValueId x) {
  if (!ok()) return kInvalidValue;
  const int64_t features = LastDim(x);
  ValueId gamma = Parameter(fmt::format("{}.weight", name), ir::F32({features}));
  ValueId beta = Parameter(fmt::format("{}.bias", name), ir::F32({features}));
  return Op(OpKind::kLayerNorm, {x, gamma, beta}, {{"epsilon", 1e-5}}, name);
}

ValueId NetBuilder::Dropout(const std::string& name, ValueId x, double p) {
  if (p == 0.0) return x;
  return Op(OpKind::kDropout, {x}, {{"p", p}, {"seed", next_seed_++}}, name);
}

ValueId NetBuilder::Relu(const std::string& name, ValueId x) {
  return Op(OpKind::kRelu, {x}, {}, name);
}

ValueId NetBuilder::MaxPool(const std::string& name, ValueId x, int64_t kernel, int64_t stride,
                            int64_t pad) {
  return Op(OpKind::kMaxPool, {x},
            {{"kernel", IntList{kernel, kernel}},
             {"strides", IntList{stride, stride}},
             {"pads", IntList{pad, pad, pad, pad}}},
            name);
}

ValueId NetBuilder::ResizeBilinear(const std::string& name, ValueId x, int64_t height,
                                   int64_t width) {
  return Op(OpKind::kResizeBilinear, {x},
            {{"size", IntList{height, width}}, {"align_corners", false}}, name);
}

ValueId NetBuilder::Concat(const std::string& name, std::vector<ValueId> inputs, int64_t axis) {
  return Op(OpKind::kConcat, std::move(inputs), {{"axis", axis}}, name);
}

}  // namespace spillway::models
