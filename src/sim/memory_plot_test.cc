#include "sim/memory_plot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "sim/svg_plot_testing.h"

namespace spillway::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

struct Point {
  double x = 0;
  double y = 0;
};

std::vector<std::string> Lines(const std::string& svg) {
  std::vector<std::string> lines;
  std::istringstream stream(svg);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// The points of the (single) memory polyline. Plain string search: the
// attribute can be tens of kilobytes, too long for std::regex's recursion.
std::vector<Point> PolylinePoints(const std::string& svg) {
  const size_t element = svg.find("<polyline class=\"memory\"");
  if (element == std::string::npos) return {};
  const size_t begin = svg.find("points=\"", element) + 8;
  const size_t end = svg.find('"', begin);
  std::vector<Point> points;
  std::istringstream stream(svg.substr(begin, end - begin));
  for (std::string pair; stream >> pair;) {
    const size_t comma = pair.find(',');
    points.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return points;
}

double MinY(const std::vector<Point>& points) {
  double min_y = 1e9;
  for (const Point& point : points) min_y = std::min(min_y, point.y);
  return min_y;
}

std::vector<Point> PeakMarkers(const std::string& svg) {
  const std::regex pattern(R"re(<circle class="peak" cx="([\d.]+)" cy="([\d.]+)")re");
  std::vector<Point> markers;
  std::smatch match;
  for (const std::string& line : Lines(svg)) {
    if (line.size() < 1000 && std::regex_search(line, match, pattern)) {
      markers.push_back({std::stod(match[1]), std::stod(match[2])});
    }
  }
  return markers;
}

struct Tick {
  double position = 0;  // x for the time axis, y for the memory axis
  std::string label;
};

std::vector<Tick> Ticks(const std::string& svg, bool memory_axis) {
  const std::regex pattern(
      memory_axis ? R"re(<text class="ytick" x="[\d.]+" y="([\d.]+)"[^>]*>([^<]*)</text>)re"
                  : R"re(<text class="xtick" x="([\d.]+)"[^>]*>([^<]*)</text>)re");
  std::vector<Tick> ticks;
  std::smatch match;
  for (const std::string& line : Lines(svg)) {
    if (line.size() < 1000 && std::regex_search(line, match, pattern)) {
      ticks.push_back({std::stod(match[1]), match[2]});
    }
  }
  return ticks;
}

std::vector<std::string> Labels(const std::vector<Tick>& ticks) {
  std::vector<std::string> labels;
  for (const Tick& tick : ticks) labels.push_back(tick.label);
  return labels;
}

// Where the memory axis puts `bytes`, read back from its first and last tick
// labels ("0 GiB" ... "18 GiB"), so the check does not share the plot's maths.
double YOfBytes(const std::string& svg, double bytes) {
  const std::vector<Tick> ticks = Ticks(svg, /*memory_axis=*/true);
  EXPECT_GE(ticks.size(), 2u);
  if (ticks.size() < 2) return 0;
  auto value = [](const Tick& tick) {
    const double number = std::stod(tick.label);
    const std::string unit = tick.label.substr(tick.label.find(' ') + 1);
    const double scale = unit == "GiB" ? kGiB : unit == "MiB" ? kMiB : unit == "KiB" ? 1024 : 1;
    return number * scale;
  };
  const Tick& low = ticks.front();
  const Tick& high = ticks.back();
  return low.position +
         (bytes - value(low)) * (high.position - low.position) / (value(high) - value(low));
}

// Every '&' starts an entity: nothing was left unescaped.
bool AmpersandsAreEntities(const std::string& svg) {
  for (size_t at = svg.find('&'); at != std::string::npos; at = svg.find('&', at + 1)) {
    const std::string_view rest = std::string_view(svg).substr(at);
    if (!rest.starts_with("&amp;") && !rest.starts_with("&lt;") && !rest.starts_with("&gt;") &&
        !rest.starts_with("&quot;") && !rest.starts_with("&apos;")) {
      return false;
    }
  }
  return true;
}

size_t Count(const std::string& text, std::string_view what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

std::string Trimmed(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

SimulationResult SmallResult() {
  SimulationResult result;
  result.step_time_s = 4e-3;
  result.memory = {{0, 1 * kGiB}, {1e-3, 12 * kGiB}, {2e-3, 6 * kGiB}, {3e-3, 2 * kGiB}};
  result.peak_bytes = 12 * kGiB;
  result.peak_time_s = 1e-3;
  return result;
}

TEST(MemoryPlotTest, IsASelfContainedSvgWithTitleLegendAndBudget) {
  const std::string svg =
      MemoryPlotSvg(SmallResult(), 16 * kGiB, 16 * kGiB, "resnet50 <b=256> & \"swap\"'s plan");
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_TRUE(Trimmed(svg).ends_with("</svg>"));
  EXPECT_EQ(Count(svg, "<svg"), 1u);
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_EQ(Count(svg, "<g "), Count(svg, "</g>"));
  EXPECT_THAT(svg, HasSubstr("resnet50 &lt;b=256&gt; &amp; &quot;swap&quot;&apos;s plan"));
  EXPECT_THAT(svg, Not(HasSubstr("<b=256>")));
  EXPECT_TRUE(AmpersandsAreEntities(svg));
  EXPECT_THAT(svg, HasSubstr(">budget 16.0 GiB</text>"));
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray=\"6 4\""));
  EXPECT_THAT(svg, HasSubstr(">allocated</text>"));
  EXPECT_THAT(svg, HasSubstr(">peak 12.0 GiB</text>"));
  EXPECT_THAT(svg, HasSubstr("step 4.0 ms, peak 12.0 GiB at 1.0 ms (75.0% of the budget)"));
  // Arena equal to the budget: one line is enough.
  EXPECT_THAT(svg, Not(HasSubstr("class=\"arena\"")));
  for (std::string_view external : {"<script", "href", "url(", "@import", "@font-face"}) {
    EXPECT_THAT(svg, Not(HasSubstr(external)));
  }
}

TEST(MemoryPlotTest, AxesHaveNiceTicksInHumanUnits) {
  const std::string svg = MemoryPlotSvg(SmallResult(), 16 * kGiB, 16 * kGiB, "ticks");
  EXPECT_THAT(Labels(Ticks(svg, /*memory_axis=*/true)),
              ElementsAre("0 GiB", "2 GiB", "4 GiB", "6 GiB", "8 GiB", "10 GiB", "12 GiB", "14 GiB",
                          "16 GiB", "18 GiB"));
  EXPECT_THAT(Labels(Ticks(svg, /*memory_axis=*/false)),
              ElementsAre("0.0", "0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0"));
  EXPECT_THAT(svg, HasSubstr(">time (ms)</text>"));

  SimulationResult small;
  small.step_time_s = 0.25;
  small.memory = {{0, 300 * kMiB}, {0.1, 700 * kMiB}};
  const std::string megabytes = MemoryPlotSvg(small, 0, 0, "small");
  EXPECT_THAT(Labels(Ticks(megabytes, /*memory_axis=*/true)),
              ElementsAre("0 MiB", "100 MiB", "200 MiB", "300 MiB", "400 MiB", "500 MiB", "600 MiB",
                          "700 MiB", "800 MiB"));
  EXPECT_THAT(Labels(Ticks(megabytes, /*memory_axis=*/false)),
              ElementsAre("0", "50", "100", "150", "200", "250"));
  // No budget given, none drawn.
  EXPECT_THAT(megabytes, Not(HasSubstr("class=\"budget\"")));
  EXPECT_THAT(megabytes, Not(HasSubstr("budget")));
}

TEST(MemoryPlotTest, CurveIsAStepFunctionThroughEveryLevel) {
  const std::string svg = MemoryPlotSvg(SmallResult(), 16 * kGiB, 0, "steps");
  const std::vector<Point> points = PolylinePoints(svg);
  // Up from the axis, then a horizontal and a vertical segment per change,
  // then along to the end of the step and down to the axis.
  ASSERT_THAT(points, SizeIs(10));
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const bool vertical = points[i].x == points[i + 1].x;
    const bool horizontal = points[i].y == points[i + 1].y;
    EXPECT_TRUE(vertical != horizontal) << "segment " << i;
    EXPECT_EQ(vertical, i % 2 == 0) << "segment " << i;
  }
  const double axis = YOfBytes(svg, 0);
  EXPECT_NEAR(points.front().y, axis, 0.1);
  EXPECT_NEAR(points.back().y, axis, 0.1);
  const std::vector<double> levels = {1, 12, 6, 2};
  for (size_t i = 0; i < levels.size(); ++i) {
    EXPECT_NEAR(points[2 * i + 1].y, YOfBytes(svg, levels[i] * kGiB), 0.1) << "level " << i;
  }
  // x: evenly spaced at 0, 1, 2, 3 ms, and the curve ends at the step time.
  const double ms = (points[3].x - points[1].x);
  EXPECT_GT(ms, 0);
  EXPECT_NEAR(points[5].x - points[3].x, ms, 0.1);
  EXPECT_NEAR(points[8].x - points[7].x, ms, 0.1);
  EXPECT_NEAR(points[9].x - points[0].x, 4 * ms, 0.2);

  const std::vector<Point> peaks = PeakMarkers(svg);
  ASSERT_THAT(peaks, SizeIs(1));
  EXPECT_EQ(peaks[0].y, MinY(points));
  EXPECT_NEAR(peaks[0].x, points[3].x, 0.1);
}

TEST(MemoryPlotTest, ArenaLineIsDrawnWhenItDiffersFromTheBudget) {
  const std::string svg = MemoryPlotSvg(SmallResult(), 16 * kGiB, 14 * kGiB, "arena");
  EXPECT_THAT(svg, HasSubstr("class=\"arena\""));
  EXPECT_THAT(svg, HasSubstr(">arena 14.0 GiB</text>"));
  EXPECT_THAT(svg, HasSubstr(">budget 16.0 GiB</text>"));
  EXPECT_TRUE(Trimmed(svg).ends_with("</svg>"));
}

TEST(MemoryPlotTest, AHugeCurveIsBoundedAndKeepsItsPeak) {
  // 100k events: a sawtooth between 4 and 6 GiB, and one spike to 15 GiB that
  // lasts a nanosecond, far narrower than a pixel.
  SimulationResult result;
  result.step_time_s = 1.0;
  constexpr int kEvents = 100'000;
  for (int i = 0; i < kEvents; ++i) {
    const double t = static_cast<double>(i) / kEvents;
    result.memory.push_back({t, (i % 2 == 0 ? 4 : 6) * kGiB});
  }
  constexpr int kSpike = 61'235;
  result.memory.insert(result.memory.begin() + kSpike + 1,
                       {result.memory[kSpike].time_s + 1e-9, 15 * kGiB});
  result.peak_bytes = 15 * kGiB;

  const std::string svg = MemoryPlotSvg(result, 16 * kGiB, 16 * kGiB, "huge");
  const std::vector<Point> points = PolylinePoints(svg);
  ASSERT_FALSE(points.empty());
  EXPECT_LE(points.size(), 2000u);  // one step per pixel column at most (~860 px)
  EXPECT_LT(svg.size(), 100'000u);
  EXPECT_NEAR(MinY(points), YOfBytes(svg, 15.0 * kGiB), 0.1);
  const std::vector<Point> peaks = PeakMarkers(svg);
  ASSERT_THAT(peaks, SizeIs(1));
  EXPECT_EQ(peaks[0].y, MinY(points));
  EXPECT_THAT(svg, HasSubstr(">peak 15.0 GiB</text>"));
  EXPECT_THAT(svg, HasSubstr("100001 memory events drawn as the maximum per pixel"));
  // The sawtooth's top is everywhere, so the envelope is 6 GiB apart from the spike.
  int at_six = 0;
  for (const Point& point : points) at_six += std::abs(point.y - YOfBytes(svg, 6.0 * kGiB)) < 0.1;
  EXPECT_GE(at_six, 2);
  EXPECT_TRUE(Trimmed(svg).ends_with("</svg>"));
}

TEST(MemoryPlotTest, APeakInTheLastColumnsComesBackDown) {
  // The spike is the last change but one: after it the curve must return to
  // its level rather than stay at the peak to the end.
  SimulationResult result;
  result.step_time_s = 1.0;
  for (int i = 0; i < 10'000; ++i) result.memory.push_back({i * 1e-5, 2 * kGiB});
  result.memory.push_back({0.5, 9 * kGiB});
  result.memory.push_back({0.5 + 1e-9, 3 * kGiB});
  const std::string svg = MemoryPlotSvg(result, 0, 0, "late spike");
  const std::vector<Point> points = PolylinePoints(svg);
  ASSERT_GE(points.size(), 4u);
  EXPECT_NEAR(MinY(points), YOfBytes(svg, 9.0 * kGiB), 0.1);
  EXPECT_NEAR(points[points.size() - 2].y, YOfBytes(svg, 3.0 * kGiB), 0.1);
}

TEST(MemoryPlotTest, AnEmptyCurveStillGivesAPlot) {
  const std::string svg = MemoryPlotSvg(SimulationResult{}, 16 * kGiB, 0, "nothing");
  EXPECT_TRUE(svg.starts_with("<svg"));
  EXPECT_TRUE(Trimmed(svg).ends_with("</svg>"));
  EXPECT_THAT(svg, Not(HasSubstr("<polyline")));
  EXPECT_THAT(svg, HasSubstr("no memory events"));
  EXPECT_THAT(svg, HasSubstr(">budget 16.0 GiB</text>"));
  // Nothing divided by a zero-length axis.
  EXPECT_FALSE(std::regex_search(svg, std::regex(R"re(\b(nan|inf)\b)re"))) << svg;
}

// ---- Layout ----
//
// Text boxes are estimated as the plot estimates them (sim/svg_plot_testing.h).

// The y of the first horizontal line of a class ("budget", "arena"), or -1.
double LineY(const std::string& svg, const std::string& css_class) {
  const size_t at = svg.find("<line class=\"" + css_class + "\"");
  if (at == std::string::npos) return -1;
  return std::stod(testing::Attribute(svg.substr(at, svg.find('>', at) - at), "y1"));
}

double LabelY(const std::string& svg, const std::string& css_class) {
  const size_t at = svg.find("<text class=\"" + css_class + "-label\"");
  if (at == std::string::npos) return -1;
  return std::stod(testing::Attribute(svg.substr(at, svg.find('>', at) - at), "y"));
}

TEST(MemoryPlotLayoutTest, ALongTitleIsShortenedToThePlotWidth) {
  std::string title;
  for (int i = 0; i < 30; ++i) title += fmt::format("word{} ", i);
  const std::string svg = MemoryPlotSvg(SmallResult(), 16 * kGiB, 14 * kGiB, title);
  testing::ExpectTextDoesNotCollide(svg);
  EXPECT_THAT(svg, HasSubstr("\u2026</text>"));
  // The <title> element keeps all of it.
  EXPECT_THAT(svg, HasSubstr("<title>" + title + "</title>"));
}

TEST(MemoryPlotLayoutTest, AnArenaJustBelowTheBudgetKeepsItsLabelClear) {
  for (const int64_t arena : {16 * kGiB - 64 * kMiB, 15 * kGiB, 14 * kGiB, 8 * kGiB}) {
    const std::string svg = MemoryPlotSvg(SmallResult(), 16 * kGiB, arena, "close lines");
    testing::ExpectTextDoesNotCollide(svg);
    const double budget_y = LineY(svg, "budget");
    const double label_y = LabelY(svg, "arena");
    ASSERT_GT(budget_y, 0);
    // The label's glyphs (12 px tall above the baseline) do not cross the budget line.
    EXPECT_FALSE(label_y - 10 < budget_y && budget_y < label_y + 3)
        << "arena " << arena << ": label at " << label_y << ", budget line at " << budget_y;
  }
}

TEST(MemoryPlotLayoutTest, WideTickLabelsLeaveTheAxisTitleClear) {
  SimulationResult result;
  result.step_time_s = 0.25;
  result.memory = {{0, 300 * kMiB}, {0.1, 900 * kMiB}};
  for (const int64_t budget : {int64_t{0}, 950 * kMiB, 1000 * kMiB}) {
    const std::string svg = MemoryPlotSvg(result, budget, 0, "three digits");
    testing::ExpectTextDoesNotCollide(svg);
  }
  SimulationResult fractional;
  fractional.step_time_s = 1e-3;
  fractional.memory = {{0, 100 * kMiB}, {1e-4, 1200 * kMiB}};
  testing::ExpectTextDoesNotCollide(MemoryPlotSvg(fractional, 0, 0, "fractions"));
}

TEST(MemoryPlotLayoutTest, ASmallWorkloadIsScaledToItselfNotToAHugeBudget) {
  SimulationResult result;
  result.step_time_s = 1e-3;
  result.memory = {{0, 2 * kMiB}, {5e-4, 10 * kMiB}, {8e-4, 1 * kMiB}};
  const std::string svg = MemoryPlotSvg(result, 16 * kGiB, 12 * kMiB, "small");
  testing::ExpectTextDoesNotCollide(svg);
  // The peak reaches most of the way up, not a flat line on the axis.
  const double axis = YOfBytes(svg, 0);
  const double top = YOfBytes(svg, 12 * kMiB);
  EXPECT_LT(MinY(PolylinePoints(svg)), axis - 0.6 * (axis - top));
  EXPECT_THAT(svg, Not(HasSubstr("class=\"budget\"")));
  EXPECT_THAT(svg, HasSubstr("budget 16.0 GiB off the scale"));
  EXPECT_THAT(svg, HasSubstr(">arena 12.0 MiB</text>"));
  // A budget near the peak is drawn, on the scale.
  EXPECT_THAT(MemoryPlotSvg(result, 14 * kMiB, 12 * kMiB, "near"), HasSubstr("class=\"budget\""));
}

TEST(MemoryPlotLayoutTest, TheDefaultPlotsDoNotCollide) {
  testing::ExpectTextDoesNotCollide(
      MemoryPlotSvg(SmallResult(), 16 * kGiB, 16 * kGiB, "resnet50, hybrid"));
  testing::ExpectTextDoesNotCollide(MemoryPlotSvg(SimulationResult{}, 16 * kGiB, 0, "nothing"));
}

// rsvg-convert (librsvg2-bin) renders the plot at several sizes; each PNG
// must come out with more than the white background in it.
TEST(MemoryPlotRenderTest, RsvgConvertRendersNonBlankPngs) {
  if (!testing::HaveRsvgConvert()) GTEST_SKIP() << testing::kNoRsvgConvert;
  testing::ExpectRendersNonBlank(
      MemoryPlotSvg(SmallResult(), 16 * kGiB, 14 * kGiB, "resnet50 \u2014 hybrid, rendered"),
      "memory_plot_test");
}

}  // namespace
}  // namespace spillway::sim
