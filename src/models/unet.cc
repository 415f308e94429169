#include "models/unet.h"

#include <vector>

#include "fmt/format.h"
#include "models/layers.h"
#include "support/status_macros.h"

namespace spillway::models {
namespace {

using ir::IntList;
using ir::OpKind;
using ir::ValueId;

// base_width << depth stays far below int64's range.
constexpr int64_t kMaxUNetBaseWidth = int64_t{1} << 24;

ValueId DoubleConv(NetBuilder& net, const std::string& name, ValueId x, int64_t channels) {
  x = net.Conv2d(name + ".conv1", x, channels, 3, {.bias = true});
  x = net.Relu(name + ".relu1", x);
  x = net.Conv2d(name + ".conv2", x, channels, 3, {.bias = true});
  return net.Relu(name + ".relu2", x);
}

}  // namespace

absl::StatusOr<ir::Graph> BuildUNet(const ModelOptions& options) {
  RETURN_IF_ERROR(ValidateImageOptions(options));
  RETURN_IF_ERROR(RequireInRange("base_width", options.base_width, kMaxUNetBaseWidth));
  RETURN_IF_ERROR(RequireInRange("depth", options.depth, kMaxUNetDepth));
  const int64_t multiple = int64_t{1} << options.depth;
  if (options.height % multiple != 0 || options.width % multiple != 0) {
    return absl::InvalidArgumentError(
        fmt::format("height and width must be divisible by 2^depth = {}, got {}x{} with "
                    "depth {}",
                    multiple, options.height, options.width, options.depth));
  }
  const int64_t classes = ClassCount(options, 2);

  ir::Graph graph("unet");
  NetBuilder net(graph, options.seed);
  ValueId x = net.Input("images", ir::Activation({options.batch, options.height, options.width,
                                                  options.in_channels}));
  ValueId labels = net.Input("labels", ir::I64({options.batch, options.height, options.width}));

  std::vector<ValueId> skips;
  x = DoubleConv(net, "inc", x, options.base_width);
  for (int64_t level = 1; level <= options.depth; ++level) {
    skips.push_back(x);
    const std::string name = fmt::format("down{}", level);
    x = net.MaxPool(name + ".pool", x, 2, 2, 0);
    x = DoubleConv(net, name, x, options.base_width << level);
  }
  for (int64_t level = options.depth - 1; level >= 0; --level) {
    RETURN_IF_ERROR(net.status());
    const std::string name = fmt::format("up{}", options.depth - level);
    const int64_t channels = options.base_width << level;
    const ir::Shape skip_shape = net.type(skips[static_cast<size_t>(level)]).shape;
    x = net.ResizeBilinear(name + ".resize", x, skip_shape[1], skip_shape[2]);
    x = net.Conv2d(name + ".up_conv", x, channels, 2, {.pads = IntList{0, 0, 1, 1}, .bias = true});
    x = net.Concat(name + ".concat", {skips[static_cast<size_t>(level)], x}, 3);
    x = DoubleConv(net, name, x, channels);
  }
  x = net.Conv2d("outc", x, classes, 1, {.bias = true});
  net.Output(net.Op(OpKind::kCrossEntropyLoss, {x, labels}, {}, "loss"));
  RETURN_IF_ERROR(net.status());
  return graph;
}

}  // namespace spillway::models
