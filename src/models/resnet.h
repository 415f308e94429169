// ResNet v1.5 as torchvision builds it (stride on the 3x3 convolution of a
// bottleneck), and its feature extractor for DeepLabV3+.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/layers.h"
#include "models/model_options.h"

namespace spillway::models {

// Stage widths reach 8 * 4 = 32 times the base width.
inline constexpr int64_t kMaxBaseWidth = int64_t{1} << 24;

struct ResNetConfig {
  bool bottleneck = false;             // Bottleneck (1x1, 3x3, 1x1, expansion 4) or BasicBlock
  std::array<int64_t, 4> blocks = {};  // blocks per stage, layer1..layer4
};

// The configuration of resnet18, 34, 50, 101 or 152; NotFound for another depth.
absl::StatusOr<ResNetConfig> ResNetConfigForDepth(int depth);

struct ResNetFeatures {
  ir::ValueId layer1 = ir::kInvalidValue;  // stride 4
  ir::ValueId layer4 = ir::kInvalidValue;  // stride 32, or 16 with a dilated layer4
};

// conv1, bn1, relu, maxpool and layer1..layer4, with every name prefixed by
// `prefix` ("" or "backbone."). A dilated layer4 keeps stride 1 and uses
// dilation 2 instead, as torchvision's replace_stride_with_dilation=[False,
// False, True]: its first block keeps dilation 1, the others use 2.
ResNetFeatures BuildResNetFeatures(NetBuilder& net, ir::ValueId images, const ResNetConfig& config,
                                   int64_t base_width, bool dilate_layer4,
                                   const std::string& prefix);

// The classifier: features, global average pool, fc, cross-entropy loss over
// i64 labels [N]. Options: batch, height, width, in_channels, classes
// (default 1000), base_width (default 64).
absl::StatusOr<ir::Graph> BuildResNet(int depth, const ModelOptions& options);

}  // namespace spillway::models
