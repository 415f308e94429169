// Reading training images and segmentation masks with Debian's libpng and
// libjpeg. Every error names the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace spillway::train {

// 8-bit pixels, row-major, channels interleaved (HWC).
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  std::vector<uint8_t> pixels;
};

// A PNG or JPEG (by extension: .png, .jpg, .jpeg, any case) converted to
// `channels` (1: gray, 3: RGB); alpha is dropped, gray is repeated to RGB.
absl::StatusOr<Image> ReadImage(const std::string& path, int64_t channels);

// A segmentation mask: an 8-bit grayscale or palette PNG whose values (the
// palette indices, not their colours) are class ids. One channel.
absl::StatusOr<Image> ReadMask(const std::string& path);

// Whether the name ends in .png, .jpg or .jpeg (any case).
bool HasImageExtension(const std::string& path);

}  // namespace spillway::train
