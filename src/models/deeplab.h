// DeepLabV3+ (Chen et al., ECCV 2018) on a torchvision ResNet at output stride 16.
#pragma once

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"

namespace spillway::models {

// Backbone "backbone.*": resnet50 or resnet101 without avgpool and fc, layer4
// dilated (stride 16). ASPP "aspp.*" on layer4: a 1x1 conv, three 3x3 convs
// with dilation 6, 12, 18 and an image-pooling branch (global average pool,
// 1x1 conv, BN, ReLU, bilinear resize back), 256 channels each, every conv
// without bias and followed by BN and ReLU; concatenated and projected by a
// 1x1 conv to 256, BN, ReLU, dropout (default 0.5, as torchvision's ASPP).
// Decoder "decoder.*": layer1 projected to 48 channels (1x1 conv, BN, ReLU),
// the ASPP output resized bilinearly to layer1's size, concatenated, two 3x3
// convs to 256 with BN and ReLU, a 1x1 classifier conv with bias
// ("decoder.classifier", stride 4), resized to the input size ("upsample")
// and a per-pixel cross-entropy over i64 labels [N,H,W] ignoring 255.
// Options: batch, height, width, in_channels, classes (default 21),
// base_width, backbone, dropout, seed.
absl::StatusOr<ir::Graph> BuildDeepLabV3Plus(const ModelOptions& options);

}  // namespace spillway::models
