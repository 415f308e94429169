#include "models/deeplab.h"

#include <array>
#include <vector>

#include "fmt/format.h"
#include "models/layers.h"
#include "models/resnet.h"
#include "support/status_macros.h"

namespace spillway::models {
namespace {

using ir::OpKind;
using ir::ValueId;

constexpr int64_t kAsppChannels = 256;
constexpr std::array<int64_t, 3> kAsppDilations = {6, 12, 18};
constexpr int64_t kLowLevelChannels = 48;
constexpr int64_t kDecoderChannels = 256;
constexpr int64_t kIgnoreLabel = 255;  // the "void" label of PASCAL VOC

// conv, BN, ReLU: the unit every ASPP and decoder branch is made of.
ValueId ConvBnRelu(NetBuilder& net, const std::string& name, ValueId x, int64_t channels,
                   int64_t kernel, int64_t dilation = 1) {
  ValueId y = net.Conv2d(name + ".conv", x, channels, kernel, {.dilation = dilation});
  return net.Relu(name + ".relu", net.BatchNorm(name + ".bn", y));
}

}  // namespace

absl::StatusOr<ir::Graph> BuildDeepLabV3Plus(const ModelOptions& options) {
  RETURN_IF_ERROR(ValidateImageOptions(options));
  RETURN_IF_ERROR(RequireInRange("base_width", options.base_width, kMaxBaseWidth));
  ASSIGN_OR_RETURN(const double dropout, DropoutProbability(options, 0.5));
  const int64_t classes = ClassCount(options, 21);
  int depth = 0;
  if (options.backbone == "resnet50") {
    depth = 50;
  } else if (options.backbone == "resnet101") {
    depth = 101;
  } else {
    return absl::InvalidArgumentError(
        fmt::format("option 'backbone' must be resnet50 or resnet101, got '{}'", options.backbone));
  }
  ASSIGN_OR_RETURN(const ResNetConfig config, ResNetConfigForDepth(depth));

  ir::Graph graph(fmt::format("deeplabv3plus_{}", options.backbone));
  NetBuilder net(graph, options.seed);
  ValueId images = net.Input("images", ir::Activation({options.batch, options.height, options.width,
                                                       options.in_channels}));
  ValueId labels = net.Input("labels", ir::I64({options.batch, options.height, options.width}));
  const ResNetFeatures features = BuildResNetFeatures(net, images, config, options.base_width,
                                                      /*dilate_layer4=*/true, "backbone.");
  RETURN_IF_ERROR(net.status());
  // Copies: the graph's value table grows as layers are added.
  const ir::Shape high_level = net.type(features.layer4).shape;
  const ir::Shape low_level = net.type(features.layer1).shape;

  std::vector<ValueId> branches;
  branches.push_back(ConvBnRelu(net, "aspp.branch0", features.layer4, kAsppChannels, 1));
  for (size_t i = 0; i < kAsppDilations.size(); ++i) {
    branches.push_back(ConvBnRelu(net, fmt::format("aspp.branch{}", i + 1), features.layer4,
                                  kAsppChannels, 3, kAsppDilations[i]));
  }
  ValueId pooled = net.Op(OpKind::kGlobalAvgPool, {features.layer4}, {}, "aspp.pool.avgpool");
  pooled = ConvBnRelu(net, "aspp.pool", pooled, kAsppChannels, 1);
  branches.push_back(net.ResizeBilinear("aspp.pool.resize", pooled, high_level[1], high_level[2]));
  ValueId aspp = net.Concat("aspp.concat", branches, 3);
  aspp = ConvBnRelu(net, "aspp.project", aspp, kAsppChannels, 1);
  aspp = net.Dropout("aspp.dropout", aspp, dropout);

  ValueId skip = ConvBnRelu(net, "decoder.low_level", features.layer1, kLowLevelChannels, 1);
  ValueId x = net.ResizeBilinear("decoder.upsample", aspp, low_level[1], low_level[2]);
  x = net.Concat("decoder.concat", {x, skip}, 3);
  x = ConvBnRelu(net, "decoder.block1", x, kDecoderChannels, 3);
  x = ConvBnRelu(net, "decoder.block2", x, kDecoderChannels, 3);
  x = net.Conv2d("decoder.classifier", x, classes, 1, {.bias = true});
  x = net.ResizeBilinear("upsample", x, options.height, options.width);
  net.Output(
      net.Op(OpKind::kCrossEntropyLoss, {x, labels}, {{"ignore_index", kIgnoreLabel}}, "loss"));
  RETURN_IF_ERROR(net.status());
  return graph;
}

}  // namespace spillway::models
