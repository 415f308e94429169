// What the SVG plots' tests share: text boxes estimated as the plots
// estimate them, checked for collisions, and rendering by rsvg-convert.
#pragma once

#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fmt/format.h"

namespace spillway::sim::testing {

// Text boxes are estimated as the plot estimates them (0.6 em a character,
// bold 10% wider), with the font's ascent and descent around the baseline.
struct Box {
  double x0, y0, x1, y1;
  std::string text;
};

inline std::string Attribute(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size();
  return tag.substr(begin, tag.find('"', begin) - begin);
}

// Characters as shown: an entity or a UTF-8 sequence is one.
inline double ShownLength(const std::string& text) {
  double n = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) == 0x80) continue;
    if (c == '&') i = text.find(';', i);
    ++n;
  }
  return n;
}

inline std::vector<Box> TextBoxes(const std::string& svg) {
  std::vector<Box> boxes;
  for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at + 1)) {
    const size_t close = svg.find('>', at);
    const std::string tag = svg.substr(at, close - at);
    const size_t end = svg.find("</text>", close);
    const std::string text = svg.substr(close + 1, end - close - 1);
    const double x = std::stod(Attribute(tag, "x"));
    const double y = std::stod(Attribute(tag, "y"));
    const std::string size_text = Attribute(tag, "font-size");
    const double size = size_text.empty() ? 12 : std::stod(size_text);
    const bool bold = Attribute(tag, "font-weight") == "bold";
    const double width = ShownLength(text) * 0.6 * size * (bold ? 1.1 : 1.0);
    const std::string anchor = Attribute(tag, "text-anchor");
    double x0 = anchor == "middle" ? x - width / 2 : anchor == "end" ? x - width : x;
    double top = Attribute(tag, "dominant-baseline") == "middle" ? y - size / 2 : y - 0.8 * size;
    Box box{x0, top, x0 + width, top + size, text};
    if (Attribute(tag, "transform").starts_with("rotate(-90")) {
      // Rotated a quarter turn about (x, y): the run goes up the page.
      box = {x - 0.8 * size, y - width / 2, x + 0.2 * size, y + width / 2, text};
    }
    boxes.push_back(box);
  }
  return boxes;
}

inline void ExpectTextDoesNotCollide(const std::string& svg) {
  const std::vector<Box> boxes = TextBoxes(svg);
  ASSERT_GE(boxes.size(), 5u);
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box& a = boxes[i];
    EXPECT_GE(a.x0, 0) << a.text;
    EXPECT_GE(a.y0, 0) << a.text;
    EXPECT_LE(a.x1, 960) << a.text;
    EXPECT_LE(a.y1, 540) << a.text;
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const Box& b = boxes[j];
      const bool apart =
          a.x1 <= b.x0 + 0.5 || b.x1 <= a.x0 + 0.5 || a.y1 <= b.y0 + 0.5 || b.y1 <= a.y0 + 0.5;
      EXPECT_TRUE(apart) << "'" << a.text << "' overlaps '" << b.text << "'";
    }
  }
}

inline bool HaveRsvgConvert() {
  return std::system("command -v rsvg-convert >/dev/null 2>&1") == 0;
}
inline constexpr const char* kNoRsvgConvert =
    "rsvg-convert is not installed (Debian package librsvg2-bin; scripts/install-deps.sh "
    "installs it)";

// Renders `svg` at 320, 960 and 1920 pixels wide (in a temporary folder
// named after `name`); each PNG must have more ink than the background and
// less than half the page.
inline void ExpectRendersNonBlank(const std::string& svg, const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("{}.{}", name, getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path svg_path = dir / "plot.svg";
  {
    std::ofstream out(svg_path);
    out << svg;
  }
  for (const int width : {320, 960, 1920}) {
    const std::filesystem::path png_path = dir / fmt::format("plot{}.png", width);
    const std::string command = fmt::format("rsvg-convert -w {} -o '{}' '{}' 2>&1", width,
                                            png_path.string(), svg_path.string());
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    ASSERT_TRUE(png_image_begin_read_from_file(&image, png_path.c_str())) << image.message;
    image.format = PNG_FORMAT_RGB;
    std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
    ASSERT_TRUE(png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) << image.message;
    EXPECT_EQ(image.width, static_cast<unsigned>(width));
    EXPECT_EQ(image.height, static_cast<unsigned>(width * 540 / 960));
    size_t inked = 0;
    for (size_t i = 0; i + 2 < pixels.size(); i += 3) {
      inked += pixels[i] < 200 || pixels[i + 1] < 200 || pixels[i + 2] < 200;
    }
    const size_t total = pixels.size() / 3;
    EXPECT_GT(inked, total / 100) << width << " px wide: nearly blank";
    EXPECT_LT(inked, total / 2) << width << " px wide: mostly ink";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace spillway::sim::testing
