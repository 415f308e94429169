#include "models/resnet.h"

#include "fmt/format.h"
#include "support/status_macros.h"

namespace spillway::models {
namespace {

using ir::IntList;
using ir::OpKind;
using ir::ValueId;

constexpr int64_t kBottleneckExpansion = 4;

// One residual block. `stride` and `dilation` apply to its 3x3 convolution
// (the second of a BasicBlock's two, the middle of a Bottleneck's three).
ValueId ResidualBlock(NetBuilder& net, const std::string& name, ValueId x, bool bottleneck,
                      int64_t width, int64_t stride, int64_t dilation) {
  if (!net.ok()) return ir::kInvalidValue;
  const int64_t out_channels = bottleneck ? width * kBottleneckExpansion : width;
  ValueId y;
  if (bottleneck) {
    y = net.Conv2d(name + ".conv1", x, width, 1);
    y = net.Relu(name + ".relu1", net.BatchNorm(name + ".bn1", y));
    y = net.Conv2d(name + ".conv2", y, width, 3, {.stride = stride, .dilation = dilation});
    y = net.Relu(name + ".relu2", net.BatchNorm(name + ".bn2", y));
    y = net.Conv2d(name + ".conv3", y, out_channels, 1);
    y = net.BatchNorm(name + ".bn3", y);
  } else {
    y = net.Conv2d(name + ".conv1", x, width, 3, {.stride = stride, .dilation = dilation});
    y = net.Relu(name + ".relu1", net.BatchNorm(name + ".bn1", y));
    y = net.Conv2d(name + ".conv2", y, width, 3, {.dilation = dilation});
    y = net.BatchNorm(name + ".bn2", y);
  }
  ValueId shortcut = x;
  if (net.ok() && (stride != 1 || net.LastDim(x) != out_channels)) {
    shortcut = net.Conv2d(name + ".downsample.0", x, out_channels, 1, {.stride = stride});
    shortcut = net.BatchNorm(name + ".downsample.1", shortcut);
  }
  y = net.Op(OpKind::kAdd, {y, shortcut}, {}, name + ".add");
  return net.Relu(name + ".relu", y);
}

}  // namespace

absl::StatusOr<ResNetConfig> ResNetConfigForDepth(int depth) {
  switch (depth) {
    case 18:
      return ResNetConfig{.bottleneck = false, .blocks = {2, 2, 2, 2}};
    case 34:
      return ResNetConfig{.bottleneck = false, .blocks = {3, 4, 6, 3}};
    case 50:
      return ResNetConfig{.bottleneck = true, .blocks = {3, 4, 6, 3}};
    case 101:
      return ResNetConfig{.bottleneck = true, .blocks = {3, 4, 23, 3}};
    case 152:
      return ResNetConfig{.bottleneck = true, .blocks = {3, 8, 36, 3}};
    default:
      return absl::NotFoundError(
          fmt::format("no ResNet of depth {}; known depths: 18, 34, 50, 101, 152", depth));
  }
}

ResNetFeatures BuildResNetFeatures(NetBuilder& net, ValueId images, const ResNetConfig& config,
                                   int64_t base_width, bool dilate_layer4,
                                   const std::string& prefix) {
  ValueId x = net.Conv2d(prefix + "conv1", images, base_width, 7, {.stride = 2});
  x = net.Relu(prefix + "relu", net.BatchNorm(prefix + "bn1", x));
  x = net.MaxPool(prefix + "maxpool", x, 3, 2, 1);
  ResNetFeatures features;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = base_width << stage;
    const bool dilated = dilate_layer4 && stage == 3;
    const int64_t stage_stride = stage == 0 || dilated ? 1 : 2;
    for (int64_t block = 0; block < config.blocks[static_cast<size_t>(stage)]; ++block) {
      const int64_t stride = block == 0 ? stage_stride : 1;
      const int64_t dilation = dilated && block > 0 ? 2 : 1;
      x = ResidualBlock(net, fmt::format("{}layer{}.{}", prefix, stage + 1, block), x,
                        config.bottleneck, width, stride, dilation);
    }
    if (stage == 0) features.layer1 = x;
  }
  features.layer4 = x;
  return features;
}

absl::StatusOr<ir::Graph> BuildResNet(int depth, const ModelOptions& options) {
  ASSIGN_OR_RETURN(ResNetConfig config, ResNetConfigForDepth(depth));
  RETURN_IF_ERROR(ValidateImageOptions(options));
  RETURN_IF_ERROR(RequireInRange("base_width", options.base_width, kMaxBaseWidth));
  const int64_t classes = ClassCount(options, 1000);

  ir::Graph graph(fmt::format("resnet{}", depth));
  NetBuilder net(graph, options.seed);
  ValueId images = net.Input("images", ir::Activation({options.batch, options.height, options.width,
                                                       options.in_channels}));
  ValueId labels = net.Input("labels", ir::I64({options.batch}));
  ResNetFeatures features =
      BuildResNetFeatures(net, images, config, options.base_width, /*dilate_layer4=*/false, "");
  ValueId x = net.Op(OpKind::kGlobalAvgPool, {features.layer4}, {}, "avgpool");
  x = net.Op(OpKind::kFlatten, {x}, {{"axis", int64_t{1}}}, "flatten");
  x = net.Linear("fc", x, classes);
  ValueId loss = net.Op(OpKind::kCrossEntropyLoss, {x, labels}, {}, "loss");
  net.Output(loss);
  RETURN_IF_ERROR(net.status());
  return graph;
}

}  // namespace spillway::models
