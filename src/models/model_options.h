// Options shared by the model builders. One struct serves every model so the
// CLI can fill it from `--option=value` flags; each model reads the fields that
// apply to it (ListModels() says which) and ignores the rest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace spillway::models {

struct ModelOptions {
  int64_t batch = 1;

  // Image models.
  int64_t height = 224;
  int64_t width = 224;
  int64_t in_channels = 3;
  // Unset: the model's own default (1000 for the classifiers, 21 for
  // deeplabv3plus, 2 for unet).
  std::optional<int64_t> classes;
  // Channels of the first stage: 64 in torchvision's ResNets and in U-Net.
  int64_t base_width = 64;

  // Dropout probability; unset: the model's own default (0.5 for vgg16 and
  // deeplabv3plus, 0.1 for gpt2). 0 leaves the dropout nodes out.
  std::optional<double> dropout;
  // Dropout node k (in build order) gets seed + k, so every mask is distinct.
  int64_t seed = 0;

  // deeplabv3plus: "resnet50" or "resnet101".
  std::string backbone = "resnet50";

  // unet: number of 2x2 downsamplings.
  int64_t depth = 4;

  // gpt2.
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t d_model = 768;
  int64_t seq_len = 1024;
  int64_t vocab = 50257;
};

// InvalidArgument naming the option unless value > 0.
absl::Status RequirePositive(std::string_view option, int64_t value);

// InvalidArgument naming the option unless 0 < value <= limit. Options that
// multiply into channel counts have an upper limit so the products cannot
// overflow.
absl::Status RequireInRange(std::string_view option, int64_t value, int64_t limit);

// Validates batch, height, width, in_channels and classes for the image models.
absl::Status ValidateImageOptions(const ModelOptions& options);

// options.classes, or the model's default when unset.
int64_t ClassCount(const ModelOptions& options, int64_t model_default);

// options.dropout or the model's default, checked to lie in [0, 1).
absl::StatusOr<double> DropoutProbability(const ModelOptions& options, double model_default);

}  // namespace spillway::models
