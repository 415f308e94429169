// What the SVG plots (the memory plot, the budget sweep's plot) share: the
// canvas, text that fits without font metrics, XML escaping, tick steps and
// units, and the legend row. Internal to sim.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fmt/format.h"

namespace spillway::sim::svg {

// Canvas and plot area, in SVG user units (pixels at 100%).
constexpr double kWidth = 960;
constexpr double kHeight = 540;
// The plot's left edge leaves room for the vertical axis's title (rotated, in
// the first kAxisTitleBand pixels) and its longest tick label.
constexpr double kMinLeft = 76;
constexpr double kAxisTitleBand = 26;
constexpr double kRight = kWidth - 24;
constexpr double kTop = 84;
constexpr double kBottom = kHeight - 52;
constexpr double kPlotHeight = kBottom - kTop;

// Text widths are estimated from the length (no font metrics without a
// renderer): 0.6 em a character is generous for sans-serif digits and letters.
constexpr double kCharWidth = 0.6;
inline double TextWidth(std::string_view text, double font_size) {
  return kCharWidth * font_size * static_cast<double>(text.size());
}

// `text` in at most `width` pixels at `font_size`: cut at a word if one ends
// in the last third, and ended with an ellipsis.
inline std::string Shorten(std::string_view text, double font_size, double width) {
  const auto fits = static_cast<size_t>(width / (kCharWidth * font_size));
  if (text.size() <= fits) return std::string(text);
  if (fits <= 1) return "\u2026";
  size_t cut = fits - 1;
  const size_t space = text.rfind(' ', cut);
  if (space != std::string_view::npos && space >= cut * 2 / 3) cut = space;
  // Do not split a UTF-8 sequence.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  std::string out(text.substr(0, cut));
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out + "\u2026";
}

constexpr std::string_view kGridColor = "#e6e6e6";

inline std::string EscapeXml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab and newline are not allowed in
        // XML 1.0 at all, not even as references.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

// 1, 2 or 5 times a power of ten, giving about `target` intervals over `range`.
inline double NiceStep(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / magnitude;
  const double nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  return nice * magnitude;
}

// Enough decimals that consecutive ticks of `step` read differently.
inline int Decimals(double step) {
  return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
}

struct ByteUnit {
  double bytes;
  std::string_view name;
};

// The largest binary unit the data reaches, so ticks read "4 GiB", not "4096 MiB".
inline ByteUnit UnitFor(double max_bytes) {
  constexpr std::array<ByteUnit, 5> kUnits = {{{1.0, "B"},
                                               {1024.0, "KiB"},
                                               {1024.0 * 1024, "MiB"},
                                               {1024.0 * 1024 * 1024, "GiB"},
                                               {1024.0 * 1024 * 1024 * 1024, "TiB"}}};
  ByteUnit unit = kUnits[0];
  for (const ByteUnit& candidate : kUnits) {
    if (max_bytes >= candidate.bytes) unit = candidate;
  }
  return unit;
}

inline std::string Coordinate(double value) { return fmt::format("{:.1f}", value); }

// A vertical axis from zero to a round value at or above `max` (in the
// units its labels show): its ticks, about `target` of them, each labelled
// `label(value, decimals)`, and the widest label's estimated width.
struct ValueAxis {
  double top = 0;
  std::vector<std::pair<double, std::string>> ticks;
  double widest = 0;
};
template <typename Label>
ValueAxis MakeValueAxis(double max, int target, Label label) {
  ValueAxis axis;
  const double step = NiceStep(max, target);
  axis.top = std::ceil(max / step) * step;
  const int decimals = Decimals(step);
  for (int i = 0; i * step <= axis.top * (1 + 1e-9); ++i) {
    const double value = i * step;
    axis.ticks.emplace_back(value, label(value, decimals));
    axis.widest = std::max(axis.widest, TextWidth(axis.ticks.back().second, 12));
  }
  return axis;
}

// The plot's left edge: room for the vertical axis's title and its widest
// tick label.
inline double LeftEdge(const ValueAxis& axis) {
  return std::max(kMinLeft, kAxisTitleBand + 8 + axis.widest + 8);
}

// The legend above the plot: one row, or two where one would run past the
// plot's right edge. Widths are estimated from the text length (no font
// metrics without a renderer); 7 px a character suits 12 px sans-serif.
class Legend {
 public:
  explicit Legend(double left) : left_(left) {}
  void Add(std::string_view symbol_svg, std::string_view label) {
    entries_.push_back({std::string(symbol_svg), std::string(label)});
  }
  std::string svg() const {
    double width = 0;
    for (const Entry& entry : entries_) width += Width(entry);
    // Two rows share the band one row sits in the middle of.
    const bool two_rows = left_ + width > kRight;
    std::string out;
    double x = left_;
    double y = two_rows ? kY - 8 : kY;
    for (const Entry& entry : entries_) {
      if (two_rows && x > left_ && x + Width(entry) > kRight) {
        x = left_;
        y = kY + 8;
      }
      out += fmt::format(
          "<g transform=\"translate({},{})\">{}</g>\n<text class=\"legend\" x=\"{}\" "
          "y=\"{}\">{}</text>\n",
          Coordinate(x), Coordinate(y), entry.symbol_svg, Coordinate(x + 26), Coordinate(y + 4),
          EscapeXml(entry.label));
      x += Width(entry);
    }
    return out;
  }

 private:
  struct Entry {
    std::string symbol_svg;
    std::string label;
  };
  static double Width(const Entry& entry) { return 26 + TextWidth(entry.label, 12) + 24; }

  static constexpr double kY = 64;
  double left_;
  std::vector<Entry> entries_;
};

// The pieces every plot is made of, in the order they are drawn.

// The document's start: its size, its <title>, a white background and the
// title line at `left`, shortened to the plot's width.
inline std::string Begin(std::string_view title, double left) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<title>{2}</title>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text class=\"title\" x=\"{3}\" y=\"26\" font-size=\"18\" font-weight=\"bold\">{4}</text>\n",
      kWidth, kHeight, EscapeXml(title), Coordinate(left),
      // Bold glyphs are wider: 10% more room a character.
      EscapeXml(Shorten(title, 18 * 1.1, kRight - left)));
}

// The grey line under the title.
inline std::string Subtitle(std::string_view text, double left) {
  return fmt::format("<text class=\"subtitle\" x=\"{}\" y=\"46\" fill=\"#555\">{}</text>\n",
                     Coordinate(left), EscapeXml(Shorten(text, 12, kRight - left)));
}

// A horizontal grid line across the plot at `y`, labelled left of the axis.
inline std::string YTick(double left, double y, std::string_view label) {
  return fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\"/>\n"
      "<text class=\"ytick\" x=\"{4}\" y=\"{1}\" text-anchor=\"end\" "
      "dominant-baseline=\"middle\">{5}</text>\n",
      Coordinate(left), Coordinate(y), Coordinate(kRight), kGridColor, Coordinate(left - 8),
      EscapeXml(label));
}

// A vertical grid line down the plot at `x`, labelled below the axis.
inline std::string XTick(double x, std::string_view label) {
  return fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"{3}\"/>\n"
      "<text class=\"xtick\" x=\"{0}\" y=\"{4}\" text-anchor=\"middle\">{5}</text>\n",
      Coordinate(x), Coordinate(kTop), Coordinate(kBottom), kGridColor, Coordinate(kBottom + 18),
      EscapeXml(label));
}

// The axes' titles: below the plot, and turned up left of it.
inline std::string AxisTitles(double left, std::string_view x_title, std::string_view y_title) {
  const double middle_y = kTop + kPlotHeight / 2;
  return fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text x=\"18\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {})\">"
      "{}</text>\n",
      Coordinate(left + (kRight - left) / 2), Coordinate(kBottom + 40), EscapeXml(x_title),
      Coordinate(middle_y), Coordinate(middle_y), EscapeXml(y_title));
}

// A grey note in the middle of an empty plot.
inline std::string Note(double left, std::string_view text) {
  return fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
                     Coordinate(left + (kRight - left) / 2), Coordinate(kTop + kPlotHeight / 2),
                     EscapeXml(text));
}

// The plot's frame, drawn last, and the document's end.
inline std::string End(double left) {
  return fmt::format(
             "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
             "stroke=\"#333\"/>\n",
             Coordinate(left), Coordinate(kTop), Coordinate(kRight - left),
             Coordinate(kPlotHeight)) +
         "</svg>\n";
}

}  // namespace spillway::sim::svg
