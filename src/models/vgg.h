// VGG-16 (configuration D of Simonyan and Zisserman) in torchvision's layout.
#pragma once

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"

namespace spillway::models {

// 13 3x3 convolutions with bias and ReLU, five 2x2 max pools ("features.N"
// with torchvision's indices), then classifier.0..6: 25088 -> 4096 -> 4096 ->
// classes with ReLU and dropout. torchvision's adaptive average pool to 7x7 is
// left out when the feature map is 7x7 (224x224 input), is an exact avg_pool
// when the map is a multiple of 7 on both axes (e.g. 448x448), and any other
// size is an InvalidArgument. Options: batch, height, width, in_channels,
// classes (default 1000), dropout (default 0.5), seed.
absl::StatusOr<ir::Graph> BuildVgg16(const ModelOptions& options);

}  // namespace spillway::models
