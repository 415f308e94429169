#include "sim/sweep_plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "fmt/format.h"
#include "sim/svg_plot.h"
#include "support/units.h"

namespace spillway::sim {
namespace {

// One colour a series, in order (red and grey are the crosses' and the
// `none` line's).
constexpr std::array<std::string_view, 7> kSeriesColors = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr std::string_view kNoneColor = "#7f7f7f";

std::string_view ColorOf(size_t series) { return kSeriesColors[series % kSeriesColors.size()]; }

// A cross centred on (x, y): a budget no plan of the series fits.
std::string Cross(double x, double y, std::string_view color) {
  return fmt::format(
      "<path class=\"infeasible\" d=\"M{} {}L{} {}M{} {}L{} {}\" stroke=\"{}\" "
      "stroke-width=\"2\"/>\n",
      svg::Coordinate(x - 4), svg::Coordinate(y - 4), svg::Coordinate(x + 4),
      svg::Coordinate(y + 4), svg::Coordinate(x - 4), svg::Coordinate(y + 4),
      svg::Coordinate(x + 4), svg::Coordinate(y - 4), color);
}

}  // namespace

std::string SweepPlotSvg(std::vector<SweepPlotSeries> series, int64_t none_arena_bytes,
                         std::string_view title) {
  int budgets = 0;
  int feasible = 0;
  bool any_carried = false;
  double x_max = 0;
  double y_max = 0.01;  // an axis up to +1% at least
  for (SweepPlotSeries& one : series) {
    std::ranges::sort(one.points, {}, &SweepPlotPoint::budget_bytes);
    budgets = std::max(budgets, static_cast<int>(one.points.size()));
    for (const SweepPlotPoint& point : one.points) {
      x_max = std::max(x_max, static_cast<double>(point.budget_bytes));
      if (!point.feasible) continue;
      ++feasible;
      any_carried = any_carried || point.carried;
      y_max = std::max(y_max, point.overhead);
    }
  }
  // The arena with everything kept is drawn where it lies within 1.5 times
  // the largest budget (or there is no budget); far beyond, it would squeeze
  // the budgets into a corner, and the subtitle names it instead.
  const bool draw_none =
      none_arena_bytes > 0 && (x_max <= 0 || static_cast<double>(none_arena_bytes) <= 1.5 * x_max);
  if (draw_none) x_max = std::max(x_max, static_cast<double>(none_arena_bytes));
  if (!(x_max > 0)) x_max = 1024.0 * 1024;

  // The budget axis from zero, so the shares read as lengths; headroom for
  // the last label.
  const svg::ByteUnit x_unit = svg::UnitFor(x_max);
  const double x_step = svg::NiceStep(x_max * 1.04 / x_unit.bytes, 8);
  const double x_top = std::ceil(x_max * 1.04 / x_unit.bytes / x_step) * x_step;
  const int x_decimals = svg::Decimals(x_step);
  // The overhead axis in percent, with headroom above the highest point.
  const svg::ValueAxis y_axis = svg::MakeValueAxis(
      y_max * 100 * 1.08, 6,
      [](double value, int decimals) { return fmt::format("+{:.{}f}%", value, decimals); });
  const double left = svg::LeftEdge(y_axis);
  const double plot_width = svg::kRight - left;
  auto x_of = [&](int64_t bytes) {
    return left +
           std::clamp(static_cast<double>(bytes) / (x_top * x_unit.bytes), 0.0, 1.0) * plot_width;
  };
  auto y_of = [&](double overhead) {
    return svg::kBottom - std::clamp(overhead * 100 / y_axis.top, 0.0, 1.0) * svg::kPlotHeight;
  };

  std::string svg = svg::Begin(title, left);
  // One series: where its plans begin; several: how many.
  std::string subtitle;
  if (series.size() == 1) {
    const std::vector<SweepPlotPoint>& points = series.front().points;
    subtitle = fmt::format("{} of {} budgets have a plan", feasible, points.size());
    if (const auto first = std::ranges::find_if(points, &SweepPlotPoint::feasible);
        first != points.end()) {
      subtitle += fmt::format("; at {}: {}", FormatBytes(first->budget_bytes),
                              FormatSignedPercent(first->overhead));
    }
  } else {
    subtitle = fmt::format("{} policies at up to {} budgets", series.size(), budgets);
  }
  if (none_arena_bytes > 0) {
    subtitle += fmt::format("; with everything kept the step needs {}{}",
                            FormatBytes(none_arena_bytes), draw_none ? "" : ", off the scale");
  }
  svg += svg::Subtitle(subtitle, left);

  // Grid and ticks first, so that the curves are drawn over them.
  for (const auto& [value, label] : y_axis.ticks) svg += svg::YTick(left, y_of(value / 100), label);
  for (int i = 0; i * x_step <= x_top * (1 + 1e-9); ++i) {
    const double value = i * x_step;
    svg += svg::XTick(x_of(static_cast<int64_t>(value * x_unit.bytes)),
                      fmt::format("{:.{}f}", value, x_decimals));
  }
  svg += svg::AxisTitles(left, fmt::format("budget ({})", x_unit.name),
                         "step over the unconstrained step");

  svg::Legend legend(left);
  for (size_t k = 0; k < series.size(); ++k) {
    const std::string_view color = ColorOf(k);
    std::string line;
    for (const SweepPlotPoint& point : series[k].points) {
      if (!point.feasible) continue;
      if (!line.empty()) line += ' ';
      line += fmt::format("{},{}", svg::Coordinate(x_of(point.budget_bytes)),
                          svg::Coordinate(y_of(point.overhead)));
    }
    if (!line.empty()) {
      svg += fmt::format(
          "<polyline class=\"overhead\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
          "stroke-linejoin=\"round\" points=\"{}\"/>\n",
          color, line);
    }
    for (const SweepPlotPoint& point : series[k].points) {
      if (point.feasible) {
        // A plan made at a smaller budget: hollow.
        svg += fmt::format(
            "<circle class=\"{}\" cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\" stroke=\"{}\" "
            "stroke-width=\"1.5\"/>\n",
            point.carried ? "carried" : "point", svg::Coordinate(x_of(point.budget_bytes)),
            svg::Coordinate(y_of(point.overhead)), point.carried ? "white" : color, color);
      } else {
        // On the axis, each series a little above the one before.
        svg += Cross(x_of(point.budget_bytes), svg::kBottom - 10.0 * static_cast<double>(k), color);
      }
    }
    legend.Add(fmt::format("<line x1=\"0\" x2=\"20\" stroke=\"{0}\" stroke-width=\"1.5\"/>"
                           "<circle cx=\"10\" cy=\"0\" r=\"4\" fill=\"{0}\"/>",
                           color),
               series[k].name);
  }
  if (feasible == 0) svg += svg::Note(left, "no budget has a plan");
  if (any_carried) {
    legend.Add(fmt::format("<circle cx=\"10\" cy=\"0\" r=\"4\" fill=\"white\" stroke=\"{}\" "
                           "stroke-width=\"1.5\"/>",
                           ColorOf(0)),
               "made at a smaller budget");
  }
  if (std::ranges::any_of(series, [](const SweepPlotSeries& one) {
        return std::ranges::any_of(one.points, [](const SweepPlotPoint& p) { return !p.feasible; });
      })) {
    legend.Add(fmt::format("<path d=\"M6 -4L14 4M6 4L14 -4\" stroke=\"{}\" stroke-width=\"2\"/>",
                           series.size() == 1 ? ColorOf(0) : kNoneColor),
               "no plan fits");
  }
  if (draw_none) {
    svg += fmt::format(
        "<line class=\"none\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"{3}\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"2 3\"/>\n",
        svg::Coordinate(x_of(none_arena_bytes)), svg::Coordinate(svg::kTop),
        svg::Coordinate(svg::kBottom), kNoneColor);
    legend.Add(fmt::format("<line x1=\"10\" y1=\"-6\" x2=\"10\" y2=\"6\" stroke=\"{}\" "
                           "stroke-width=\"1.5\" stroke-dasharray=\"2 3\"/>",
                           kNoneColor),
               fmt::format("everything kept: {}", FormatBytes(none_arena_bytes)));
  }
  svg += legend.svg();
  svg += svg::End(left);
  return svg;
}

}  // namespace spillway::sim
