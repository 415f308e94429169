// U-Net (Ronneberger, Fischer and Brox, MICCAI 2015) with size-preserving
// convolutions.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/model_options.h"

namespace spillway::models {

// Deepest level supported: the image must be divisible by 2^depth anyway.
inline constexpr int64_t kMaxUNetDepth = 24;

// Level 0 "inc" and levels "down1".."down<depth>" (after a 2x2 max pool) are
// two 3x3 convs with bias and ReLU, padding 1 so sizes are preserved (the
// paper uses unpadded convs and crops the skips; padding keeps the skips
// aligned without cropping and the parameter count is the same). Channels
// start at base_width and double per level. Each "up<i>" replaces the 2x2
// up-convolution, which the IR has no op for, by a bilinear x2 resize and a
// 2x2 conv (pads [0,0,1,1]) that halves the channels: the same parameters as
// the transposed conv. It concatenates the skip (skip first, as the paper's
// figure) and applies two 3x3 convs with ReLU. "outc" is a 1x1 conv to the
// classes; the loss is a per-pixel cross-entropy over i64 labels [N,H,W].
// Height and width must be divisible by 2^depth. Options: batch, height,
// width, in_channels, classes (default 2), base_width (default 64), depth
// (default 4).
absl::StatusOr<ir::Graph> BuildUNet(const ModelOptions& options);

}  // namespace spillway::models
