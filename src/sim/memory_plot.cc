#include "sim/memory_plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "sim/svg_plot.h"
#include "support/units.h"

namespace spillway::sim {
namespace {

// Past a few points per pixel column the exact step path only adds bytes:
// the renderer cannot show the detail, so the curve is reduced per column.
constexpr int kColumns = static_cast<int>(svg::kRight - svg::kMinLeft);
constexpr size_t kMaxExactPoints = 4 * static_cast<size_t>(kColumns);

constexpr std::string_view kCurveColor = "#1f77b4";
constexpr std::string_view kBudgetColor = "#d62728";
constexpr std::string_view kArenaColor = "#7f7f7f";
constexpr std::string_view kPeakColor = "#ff7f0e";

std::string FormatMillis(double seconds) {
  const double ms = seconds * 1e3;
  if (ms >= 100) return fmt::format("{:.0f} ms", ms);
  if (ms >= 1) return fmt::format("{:.1f} ms", ms);
  return fmt::format("{:.3f} ms", ms);
}

// Both the exact path and the per-column one are drawn from a list of steps:
// from `time_s` on, `bytes` are allocated.
std::vector<MemoryPoint> ExactSteps(const std::vector<MemoryPoint>& memory) {
  std::vector<MemoryPoint> steps;
  steps.reserve(memory.size());
  for (const MemoryPoint& point : memory) {
    if (!steps.empty() && steps.back().bytes == point.bytes) continue;
    steps.push_back(point);
  }
  return steps;
}

// One step per pixel column, at the highest level the curve reaches inside
// the column (the level carried in from the left counts too), so a peak that
// lasts a nanosecond is still drawn at its full height.
std::vector<MemoryPoint> ColumnSteps(const std::vector<MemoryPoint>& memory, double end_s) {
  // The columns of the widest plot (the narrowest left margin): at most one
  // step per pixel column whatever the margin.
  const double column_s = end_s / kColumns;
  std::vector<MemoryPoint> steps;
  size_t next = 0;
  bool started = false;
  int64_t level = 0;
  for (int column = 0; column < kColumns; ++column) {
    if (next == memory.size()) {
      // Past the last event the level holds; only a peak in the column
      // before needs bringing down.
      if (!steps.empty() && steps.back().bytes != level) {
        steps.push_back({column_s * column, level});
      }
      break;
    }
    const double column_end = column_s * (column + 1);
    const bool last = column + 1 == kColumns;
    if (!started && memory[next].time_s >= column_end && !last) continue;
    int64_t highest = started ? level : memory[next].bytes;
    while (next < memory.size() && (last || memory[next].time_s < column_end)) {
      level = memory[next].bytes;
      highest = std::max(highest, level);
      ++next;
    }
    started = true;
    // A column after a peak starts from `level`, which brings the curve down.
    if (steps.empty() || steps.back().bytes != highest) {
      steps.push_back({column_s * column, highest});
    }
  }
  return steps;
}

class Canvas {
 public:
  Canvas(double left, double end_s, double top_bytes)
      : left_(left), end_s_(end_s), top_bytes_(top_bytes) {}

  double left() const { return left_; }
  double width() const { return svg::kRight - left_; }
  double X(double time_s) const { return left_ + std::clamp(time_s / end_s_, 0.0, 1.0) * width(); }
  double Y(double bytes) const {
    return svg::kBottom - std::clamp(bytes / top_bytes_, 0.0, 1.0) * svg::kPlotHeight;
  }

 private:
  double left_;
  double end_s_;
  double top_bytes_;
};

std::string Polyline(const Canvas& canvas, const std::vector<MemoryPoint>& steps, double end_s) {
  std::string points;
  std::string last;
  auto add = [&](double x, double y) {
    std::string point = fmt::format("{},{}", svg::Coordinate(x), svg::Coordinate(y));
    if (point == last) return;
    if (!points.empty()) points += ' ';
    points += point;
    last = std::move(point);
  };
  double level_y = svg::kBottom;
  for (const MemoryPoint& step : steps) {
    const double x = canvas.X(step.time_s);
    add(x, level_y);
    level_y = canvas.Y(static_cast<double>(step.bytes));
    add(x, level_y);
  }
  add(canvas.X(end_s), level_y);
  add(canvas.X(end_s), svg::kBottom);
  // The fill closes the shape along the time axis; the stroke, being a
  // polyline, does not, so the axis is not drawn over in the curve's colour.
  return fmt::format(
      "<polyline class=\"memory\" fill=\"{}\" fill-opacity=\"0.25\" stroke=\"{}\" "
      "stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"{}\"/>\n",
      kCurveColor, kCurveColor, points);
}

// A labelled horizontal line; the label sits above the line, or below it
// when `label_below` (another line runs just above).
std::string HorizontalLine(const Canvas& canvas, std::string_view css_class, int64_t bytes,
                           std::string_view color, std::string_view dash, std::string_view label,
                           bool label_right, bool label_below) {
  const double y = canvas.Y(static_cast<double>(bytes));
  return fmt::format(
      "<line class=\"{0}\" x1=\"{1}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"{4}\" "
      "stroke-width=\"1.5\" stroke-dasharray=\"{5}\"/>\n"
      "<text class=\"{0}-label\" x=\"{6}\" y=\"{7}\" fill=\"{4}\" text-anchor=\"{8}\">{9}</text>\n",
      css_class, svg::Coordinate(canvas.left()), svg::Coordinate(y), svg::Coordinate(svg::kRight),
      color, dash, svg::Coordinate(label_right ? svg::kRight - 4 : canvas.left() + 4),
      svg::Coordinate(label_below ? y + 15 : y - 5), label_right ? "end" : "start",
      svg::EscapeXml(label));
}

}  // namespace

std::string MemoryPlotSvg(const SimulationResult& result, int64_t budget_bytes, int64_t arena_bytes,
                          std::string_view title) {
  const std::vector<MemoryPoint>& memory = result.memory;

  int64_t peak = 0;
  double peak_time_s = 0;
  for (const MemoryPoint& point : memory) {
    if (point.bytes > peak) {
      peak = point.bytes;
      peak_time_s = point.time_s;
    }
  }
  double end_s = result.step_time_s;
  if (!memory.empty()) end_s = std::max(end_s, memory.back().time_s);
  // A zero-length step still needs a non-empty axis to divide by.
  if (!(end_s > 0)) end_s = 1e-3;

  const bool draw_arena = arena_bytes > 0 && arena_bytes != budget_bytes;
  // The axis spans what was allocated and reserved. A budget far above them
  // would flatten the curve against the axis: it is drawn only when it lies
  // within 1.5 times their height (or nothing else is drawn), and otherwise named at the top as off
  // the scale.
  double data_max = static_cast<double>(peak);
  if (draw_arena) data_max = std::max(data_max, static_cast<double>(arena_bytes));
  const bool budget_on_scale =
      budget_bytes > 0 && (data_max <= 0 || static_cast<double>(budget_bytes) <= 1.5 * data_max);
  const bool draw_budget = budget_on_scale;
  const bool budget_off_scale = budget_bytes > 0 && !budget_on_scale;
  if (draw_budget) data_max = std::max(data_max, static_cast<double>(budget_bytes));
  if (!(data_max > 0)) data_max = 1024.0 * 1024;

  // Headroom above the highest line so its label fits under the plot's top.
  const svg::ByteUnit unit = svg::UnitFor(data_max);
  const svg::ValueAxis y_axis =
      svg::MakeValueAxis(data_max * 1.08 / unit.bytes, 6, [&](double value, int decimals) {
        return fmt::format("{:.{}f} {}", value, decimals, unit.name);
      });
  const double left = svg::LeftEdge(y_axis);
  const Canvas canvas(left, end_s, y_axis.top * unit.bytes);

  const double end_ms = end_s * 1e3;
  const double x_step = svg::NiceStep(end_ms, 8);

  std::string svg = svg::Begin(title, left);

  std::string subtitle = fmt::format("step {}, peak {} at {}", FormatMillis(result.step_time_s),
                                     FormatBytes(peak), FormatMillis(peak_time_s));
  if (draw_budget) {
    subtitle += fmt::format(" ({:.1f}% of the budget)",
                            100.0 * static_cast<double>(peak) / static_cast<double>(budget_bytes));
  }
  if (budget_off_scale) {
    subtitle += fmt::format(", budget {} off the scale", FormatBytes(budget_bytes));
  }
  if (memory.size() > kMaxExactPoints) {
    subtitle += fmt::format(", {} memory events drawn as the maximum per pixel", memory.size());
  }
  svg += svg::Subtitle(subtitle, left);

  // Grid and ticks first, so the curve and the lines are drawn over them.
  for (const auto& [value, label] : y_axis.ticks) {
    svg += svg::YTick(left, canvas.Y(value * unit.bytes), label);
  }
  const int x_decimals = svg::Decimals(x_step);
  for (int i = 0; i * x_step <= end_ms * (1 + 1e-9); ++i) {
    const double value = i * x_step;
    svg += svg::XTick(canvas.X(value * 1e-3), fmt::format("{:.{}f}", value, x_decimals));
  }
  svg += svg::AxisTitles(left, "time (ms)", "device memory allocated");

  svg::Legend legend(left);
  if (memory.empty()) {
    svg += svg::Note(left, "no memory events");
  } else {
    const std::vector<MemoryPoint> steps =
        memory.size() > kMaxExactPoints ? ColumnSteps(memory, end_s) : ExactSteps(memory);
    svg += Polyline(canvas, steps, end_s);
    legend.Add(fmt::format("<rect x=\"0\" y=\"-6\" width=\"20\" height=\"12\" fill=\"{0}\" "
                           "fill-opacity=\"0.25\" stroke=\"{0}\"/>",
                           kCurveColor),
               "allocated");
  }

  if (draw_arena) {
    const std::string label = fmt::format("arena {}", FormatBytes(arena_bytes));
    // Left-aligned, the budget's label being on the right: the two lines can
    // be a few pixels apart.
    // Left-aligned; below its line when the budget's runs just above it,
    // which would strike the label through.
    const double gap =
        canvas.Y(static_cast<double>(arena_bytes)) - canvas.Y(static_cast<double>(budget_bytes));
    const bool below = draw_budget && gap >= 0 && gap < 18;
    svg += HorizontalLine(canvas, "arena", arena_bytes, kArenaColor, "2 3", label, false, below);
    legend.Add(fmt::format("<line x1=\"0\" x2=\"20\" stroke=\"{}\" stroke-width=\"1.5\" "
                           "stroke-dasharray=\"2 3\"/>",
                           kArenaColor),
               label);
  }
  if (draw_budget) {
    const std::string label = fmt::format("budget {}", FormatBytes(budget_bytes));
    // Right-aligned; below its line when the arena's runs just above it.
    const double gap =
        canvas.Y(static_cast<double>(budget_bytes)) - canvas.Y(static_cast<double>(arena_bytes));
    const bool below = draw_arena && gap >= 0 && gap < 18;
    svg += HorizontalLine(canvas, "budget", budget_bytes, kBudgetColor, "6 4", label, true, below);
    legend.Add(fmt::format("<line x1=\"0\" x2=\"20\" stroke=\"{}\" stroke-width=\"1.5\" "
                           "stroke-dasharray=\"6 4\"/>",
                           kBudgetColor),
               label);
  }
  if (!memory.empty()) {
    svg += fmt::format(
        "<circle class=\"peak\" cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\" stroke=\"white\"/>\n",
        svg::Coordinate(canvas.X(peak_time_s)),
        svg::Coordinate(canvas.Y(static_cast<double>(peak))), kPeakColor);
    legend.Add(fmt::format("<circle cx=\"10\" cy=\"0\" r=\"4\" fill=\"{}\"/>", kPeakColor),
               fmt::format("peak {}", FormatBytes(peak)));
  }
  svg += legend.svg();

  svg += svg::End(left);
  return svg;
}

}  // namespace spillway::sim
