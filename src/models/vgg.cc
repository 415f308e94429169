#include "models/vgg.h"

#include <array>

#include "fmt/format.h"
#include "models/layers.h"
#include "support/status_macros.h"

namespace spillway::models {
namespace {

using ir::IntList;
using ir::OpKind;
using ir::ValueId;

constexpr int64_t kPool = 0;  // a max pool in the layer list
// Configuration D: output channels of each 3x3 convolution, kPool for a pool.
constexpr std::array<int64_t, 18> kVgg16Layers = {64,  64,    kPool, 128,   128, kPool,
                                                  256, 256,   256,   kPool, 512, 512,
                                                  512, kPool, 512,   512,   512, kPool};
// The classifier's input is 512 channels at 7x7, as in torchvision.
constexpr int64_t kPooledSize = 7;

}  // namespace

absl::StatusOr<ir::Graph> BuildVgg16(const ModelOptions& options) {
  RETURN_IF_ERROR(ValidateImageOptions(options));
  ASSIGN_OR_RETURN(const double dropout, DropoutProbability(options, 0.5));
  const int64_t classes = ClassCount(options, 1000);

  ir::Graph graph("vgg16");
  NetBuilder net(graph, options.seed);
  ValueId x = net.Input("images", ir::Activation({options.batch, options.height, options.width,
                                                  options.in_channels}));
  ValueId labels = net.Input("labels", ir::I64({options.batch}));
  // torchvision numbers the modules of `features` in order: conv, relu, ... pool.
  int index = 0;
  for (int64_t layer : kVgg16Layers) {
    if (layer == kPool) {
      x = net.MaxPool(fmt::format("features.{}", index++), x, 2, 2, 0);
    } else {
      x = net.Conv2d(fmt::format("features.{}", index++), x, layer, 3, {.bias = true});
      x = net.Relu(fmt::format("features.{}", index++), x);
    }
  }
  RETURN_IF_ERROR(net.status());

  const int64_t feature_height = net.type(x).shape[1];
  const int64_t feature_width = net.type(x).shape[2];
  if (feature_height != kPooledSize || feature_width != kPooledSize) {
    if (feature_height % kPooledSize != 0 || feature_width % kPooledSize != 0) {
      return absl::InvalidArgumentError(fmt::format(
          "the feature map after features.30 is {}x{} for a {}x{} input; the classifier "
          "needs 7x7 or a multiple of 7 on both axes (input 224x224, 448x448, ...)",
          feature_height, feature_width, options.height, options.width));
    }
    const IntList kernel = {feature_height / kPooledSize, feature_width / kPooledSize};
    x = net.Op(OpKind::kAvgPool, {x}, {{"kernel", kernel}, {"strides", kernel}}, "avgpool");
  }
  x = net.Op(OpKind::kFlatten, {x}, {{"axis", int64_t{1}}}, "flatten");
  x = net.Relu("classifier.1", net.Linear("classifier.0", x, 4096));
  x = net.Dropout("classifier.2", x, dropout);
  x = net.Relu("classifier.4", net.Linear("classifier.3", x, 4096));
  x = net.Dropout("classifier.5", x, dropout);
  x = net.Linear("classifier.6", x, classes);
  net.Output(net.Op(OpKind::kCrossEntropyLoss, {x, labels}, {}, "loss"));
  RETURN_IF_ERROR(net.status());
  return graph;
}

}  // namespace spillway::models
