#include "train/image_io.h"

// clang-format off: jpeglib.h needs <cstdio> first.
#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
// clang-format on

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

#include "fmt/format.h"

namespace spillway::train {
namespace {

// Images larger than this are certainly not training images for a model that
// runs on this machine; the limit keeps sizes far from overflow.
constexpr int64_t kMaxSide = 1 << 16;

std::string LowerExtension(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  const size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string extension = path.substr(dot);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension;
}

bool IsPng(const std::string& path) { return LowerExtension(path) == ".png"; }

struct FileCloser {
  void operator()(FILE* file) const { std::fclose(file); }
};
using File = std::unique_ptr<FILE, FileCloser>;

absl::StatusOr<File> OpenForReading(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(
        fmt::format("cannot open image '{}': {}", path, std::strerror(errno)));
  }
  return file;
}

absl::Status CheckSize(const std::string& path, int64_t height, int64_t width) {
  if (height <= 0 || width <= 0 || height > kMaxSide || width > kMaxSide) {
    return absl::InvalidArgumentError(
        fmt::format("image '{}' has an unsupported size {}x{}", path, height, width));
  }
  return absl::OkStatus();
}

// ---- PNG ----

absl::StatusOr<Image> ReadPngImage(const std::string& path, int64_t channels) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&png, path.c_str()) == 0) {
    return absl::InvalidArgumentError(fmt::format("cannot read PNG '{}': {}", path, png.message));
  }
  // libpng's simplified API would convert 16-bit samples to gamma-encoded 8
  // bits and composite alpha in linear light: not the plain scaling to [0, 1]
  // that docs/training.md promises. Such files are refused.
  if ((png.format & (PNG_FORMAT_FLAG_LINEAR | PNG_FORMAT_FLAG_ALPHA)) != 0) {
    const bool sixteen = (png.format & PNG_FORMAT_FLAG_LINEAR) != 0;
    png_image_free(&png);
    return absl::InvalidArgumentError(fmt::format(
        "PNG '{}' has {}; images must be 8-bit gray, RGB or palette PNGs without alpha "
        "(convert it first, e.g. `convert IN.png -background black -alpha remove -depth 8 "
        "OUT.png`)",
        path, sixteen ? "16-bit samples" : "an alpha channel or transparency"));
  }
  Image image;
  image.height = png.height;
  image.width = png.width;
  image.channels = channels;
  if (absl::Status size = CheckSize(path, image.height, image.width); !size.ok()) {
    png_image_free(&png);
    return size;
  }
  // libpng converts 8-bit gray, RGB and palette PNGs (and gray of fewer bits,
  // scaled exactly) to 8-bit gray or RGB.
  png.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  const png_color black = {0, 0, 0};
  if (png_image_finish_read(&png, &black, image.pixels.data(), 0, nullptr) == 0) {
    return absl::InvalidArgumentError(fmt::format("cannot read PNG '{}': {}", path, png.message));
  }
  return image;
}

// libpng reports errors by longjmp. Everything that must survive one lives in
// this struct, in the caller's frame, so no local of the function that calls
// setjmp is live across it and no C++ destructor is skipped.
struct PngReadState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::jmp_buf jump;
  char message[256] = {};
};

void OnPngError(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngReadState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof(state->message), "%s", message);
  std::longjmp(state->jump, 1);
}

void OnPngWarning(png_structp, png_const_charp) {}

// Reads an 8-bit gray or palette PNG as raw sample values (palette indices
// are not expanded to colours). False with state->message on failure.
bool ReadMaskPixels(FILE* file, PngReadState* state, Image* mask) {
  state->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, state, OnPngError, OnPngWarning);
  if (state->png == nullptr) return false;
  state->info = png_create_info_struct(state->png);
  if (state->info == nullptr || setjmp(state->jump) != 0) {
    png_destroy_read_struct(&state->png, &state->info, nullptr);
    return false;
  }
  png_init_io(state->png, file);
  png_read_info(state->png, state->info);
  const int color_type = png_get_color_type(state->png, state->info);
  const int bit_depth = png_get_bit_depth(state->png, state->info);
  if ((color_type != PNG_COLOR_TYPE_GRAY && color_type != PNG_COLOR_TYPE_PALETTE) ||
      bit_depth > 8) {
    std::snprintf(state->message, sizeof(state->message),
                  "a mask must be an 8-bit (or less) grayscale or palette PNG");
    png_destroy_read_struct(&state->png, &state->info, nullptr);
    return false;
  }
  if (bit_depth < 8) png_set_packing(state->png);  // one value per byte, unscaled
  const int passes = png_set_interlace_handling(state->png);
  png_read_update_info(state->png, state->info);
  mask->height = png_get_image_height(state->png, state->info);
  mask->width = png_get_image_width(state->png, state->info);
  mask->channels = 1;
  if (mask->height <= 0 || mask->width <= 0 || mask->height > kMaxSide || mask->width > kMaxSide) {
    std::snprintf(state->message, sizeof(state->message), "unsupported size");
    png_destroy_read_struct(&state->png, &state->info, nullptr);
    return false;
  }
  mask->pixels.resize(static_cast<size_t>(mask->height * mask->width));
  for (int pass = 0; pass < passes; ++pass) {
    for (int64_t y = 0; y < mask->height; ++y) {
      png_read_row(state->png, mask->pixels.data() + y * mask->width, nullptr);
    }
  }
  png_read_end(state->png, nullptr);
  png_destroy_read_struct(&state->png, &state->info, nullptr);
  return true;
}

// ---- JPEG ----

struct JpegErrorManager {
  jpeg_error_mgr base;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnJpegError(j_common_ptr info) {
  auto* manager = reinterpret_cast<JpegErrorManager*>(info->err);
  (*info->err->format_message)(info, manager->message);
  std::longjmp(manager->jump, 1);
}

void OnJpegMessage(j_common_ptr, int) {}  // no warnings on stderr

// As for PNG: what must survive libjpeg's longjmp lives in the caller's frame.
struct JpegReadState {
  jpeg_decompress_struct decompress;
  JpegErrorManager error;
};

bool ReadJpegPixels(FILE* file, JpegReadState* state, int64_t channels, Image* image) {
  state->decompress.err = jpeg_std_error(&state->error.base);
  state->error.base.error_exit = OnJpegError;
  state->error.base.emit_message = OnJpegMessage;
  if (setjmp(state->error.jump) != 0) {
    jpeg_destroy_decompress(&state->decompress);
    return false;
  }
  jpeg_create_decompress(&state->decompress);
  jpeg_stdio_src(&state->decompress, file);
  jpeg_read_header(&state->decompress, TRUE);
  state->decompress.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&state->decompress);
  image->height = state->decompress.output_height;
  image->width = state->decompress.output_width;
  image->channels = channels;
  if (image->height > kMaxSide || image->width > kMaxSide ||
      state->decompress.output_components != channels) {
    std::snprintf(state->error.message, sizeof(state->error.message), "unsupported size or colour");
    jpeg_destroy_decompress(&state->decompress);
    return false;
  }
  image->pixels.resize(static_cast<size_t>(image->height * image->width * channels));
  while (state->decompress.output_scanline < state->decompress.output_height) {
    JSAMPROW row = image->pixels.data() + static_cast<int64_t>(state->decompress.output_scanline) *
                                              image->width * channels;
    jpeg_read_scanlines(&state->decompress, &row, 1);
  }
  jpeg_finish_decompress(&state->decompress);
  jpeg_destroy_decompress(&state->decompress);
  return true;
}

}  // namespace

bool HasImageExtension(const std::string& path) {
  const std::string extension = LowerExtension(path);
  return extension == ".png" || extension == ".jpg" || extension == ".jpeg";
}

absl::StatusOr<Image> ReadImage(const std::string& path, int64_t channels) {
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(fmt::format(
        "images can be read with 1 or 3 channels, not {} (image '{}')", channels, path));
  }
  if (!HasImageExtension(path)) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' is not a PNG or JPEG file (.png, .jpg, .jpeg)", path));
  }
  if (IsPng(path)) return ReadPngImage(path, channels);
  auto file = OpenForReading(path);
  if (!file.ok()) return file.status();
  auto state = std::make_unique<JpegReadState>();
  std::memset(state.get(), 0, sizeof(JpegReadState));
  Image image;
  if (!ReadJpegPixels(file->get(), state.get(), channels, &image)) {
    return absl::InvalidArgumentError(
        fmt::format("cannot read JPEG '{}': {}", path, state->error.message));
  }
  return image;
}

absl::StatusOr<Image> ReadMask(const std::string& path) {
  if (!IsPng(path)) {
    return absl::InvalidArgumentError(
        fmt::format("mask '{}' must be a PNG (a lossy JPEG would change class ids)", path));
  }
  auto file = OpenForReading(path);
  if (!file.ok()) return file.status();
  auto state = std::make_unique<PngReadState>();
  Image mask;
  if (!ReadMaskPixels(file->get(), state.get(), &mask)) {
    return absl::InvalidArgumentError(
        fmt::format("cannot read mask '{}': {}", path,
                    state->message[0] != 0 ? state->message : "out of memory"));
  }
  return mask;
}

}  // namespace spillway::train
