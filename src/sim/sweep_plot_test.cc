#include "sim/sweep_plot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sim/svg_plot_testing.h"

namespace spillway::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMiB = int64_t{1} << 20;

// Occurrences of `needle` in `text`.
int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

struct Marker {
  double x = 0;
  double y = 0;
};

// The centres of the markers of one class ("point", "carried"), in the order drawn.
std::vector<Marker> Markers(const std::string& svg, const std::string& css_class) {
  std::vector<Marker> markers;
  const std::string open = "<circle class=\"" + css_class + "\"";
  for (size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const std::string tag = svg.substr(at, svg.find('>', at) - at);
    markers.push_back(
        {std::stod(testing::Attribute(tag, "cx")), std::stod(testing::Attribute(tag, "cy"))});
  }
  return markers;
}

// A sweep as `spillway sweep` gives it, out of order: two budgets too small,
// the overhead falling as the budget grows, one plan made at a smaller budget.
std::vector<SweepPlotSeries> Sweep() {
  return {{"hybrid",
           {{.budget_bytes = 80 * kMiB, .feasible = true, .overhead = 0.02},
            {.budget_bytes = 20 * kMiB, .feasible = false},
            {.budget_bytes = 60 * kMiB, .feasible = true, .overhead = 0.08},
            {.budget_bytes = 40 * kMiB, .feasible = false},
            {.budget_bytes = 70 * kMiB, .feasible = true, .overhead = 0.08, .carried = true},
            {.budget_bytes = 100 * kMiB, .feasible = true, .overhead = 0}}}};
}

TEST(SweepPlotTest, IsASelfContainedSvgWithOneMarkerPerPlanAndACrossPerBudgetWithout) {
  const std::string svg = SweepPlotSvg(Sweep(), 100 * kMiB, "hybrid: <resnet18> & \"friends\"");
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  EXPECT_THAT(svg, Not(HasSubstr("<script")));
  EXPECT_THAT(svg, HasSubstr("hybrid: &lt;resnet18&gt; &amp; &quot;friends&quot;"));
  EXPECT_THAT(svg, HasSubstr("4 of 6 budgets have a plan; at 60.0 MiB: +8.0%; with everything "
                             "kept the step needs 100 MiB"));
  EXPECT_EQ(Markers(svg, "point").size(), 3u);
  EXPECT_EQ(Markers(svg, "carried").size(), 1u);
  EXPECT_EQ(Count(svg, "<path class=\"infeasible\""), 2);
  EXPECT_EQ(Count(svg, "<line class=\"none\""), 1);
  for (const char* legend :
       {"hybrid", "made at a smaller budget", "no plan fits", "everything kept: 100 MiB"}) {
    EXPECT_THAT(svg, HasSubstr(std::string(">") + legend + "</text>")) << legend;
  }
  EXPECT_THAT(svg, HasSubstr(">budget (MiB)</text>"));
  EXPECT_THAT(svg, HasSubstr(">+8%</text>"));  // a tick at the highest overhead
}

TEST(SweepPlotTest, TheCurveRunsByBudgetAndHigherOverheadIsHigherUp) {
  const std::string svg = SweepPlotSvg(Sweep(), 100 * kMiB, "order");
  std::vector<Marker> all = Markers(svg, "point");
  const std::vector<Marker> carried = Markers(svg, "carried");
  ASSERT_EQ(all.size(), 3u);
  ASSERT_EQ(carried.size(), 1u);
  // Filled markers at 60, 80 and 100 MiB, drawn by budget.
  EXPECT_LT(all[0].x, all[1].x);
  EXPECT_LT(all[1].x, all[2].x);
  EXPECT_GT(carried[0].x, all[0].x);
  EXPECT_LT(carried[0].x, all[1].x);
  // SVG's y grows downwards: +8% above +2% above +0%.
  EXPECT_LT(all[0].y, all[1].y);
  EXPECT_LT(all[1].y, all[2].y);
  EXPECT_DOUBLE_EQ(carried[0].y, all[0].y);
  // The polyline visits the four plans in the same order.
  const size_t at = svg.find("<polyline class=\"overhead\"");
  ASSERT_NE(at, std::string::npos);
  const std::string points = testing::Attribute(svg.substr(at, svg.find('>', at) - at), "points");
  EXPECT_EQ(Count(points, ","), 4);
}

TEST(SweepPlotTest, SeveralPoliciesAreCurvesOfTheirOwnColours) {
  std::vector<SweepPlotSeries> both = Sweep();
  both.push_back({"swap",
                  {{.budget_bytes = 40 * kMiB, .feasible = false},
                   {.budget_bytes = 60 * kMiB, .feasible = true, .overhead = 0.3},
                   {.budget_bytes = 100 * kMiB, .feasible = true, .overhead = 0}}});
  const std::string svg = SweepPlotSvg(both, 100 * kMiB, "resnet18");
  EXPECT_THAT(svg, HasSubstr("2 policies at up to 6 budgets"));
  EXPECT_EQ(Count(svg, "<polyline class=\"overhead\""), 2);
  EXPECT_THAT(svg, HasSubstr("stroke=\"#1f77b4\" stroke-width=\"1.5\" stroke-linejoin"));
  EXPECT_THAT(svg, HasSubstr("stroke=\"#ff7f0e\" stroke-width=\"1.5\" stroke-linejoin"));
  EXPECT_THAT(svg, HasSubstr(">swap</text>"));
  EXPECT_THAT(svg, HasSubstr(">hybrid</text>"));
  // Three budgets without a plan, two of hybrid's and one of swap's.
  EXPECT_EQ(Count(svg, "<path class=\"infeasible\""), 3);
  // The axis reaches swap's +30%.
  EXPECT_THAT(svg, HasSubstr(">+30%</text>"));
}

TEST(SweepPlotTest, AnArenaFarBeyondTheBudgetsIsNamedNotDrawn) {
  // ResNet-50 at 8000x8000 needs 101 GiB with everything kept; a sweep of a
  // 16 GB card's budgets would sit in the axis' first tenth.
  const std::string svg = SweepPlotSvg(Sweep(), 1000 * kMiB, "far");
  EXPECT_EQ(Count(svg, "<line class=\"none\""), 0);
  EXPECT_THAT(svg, HasSubstr("with everything kept the step needs 1000 MiB, off the scale"));
  EXPECT_THAT(svg, Not(HasSubstr(">everything kept:")));
  EXPECT_THAT(svg, HasSubstr(">budget (MiB)</text>"));
  EXPECT_THAT(svg, Not(HasSubstr(">200</text>")));  // the axis ends near 100 MiB
}

TEST(SweepPlotTest, NoPlanAnywhereStillGivesAPlot) {
  const std::string svg =
      SweepPlotSvg({{"swap", {{.budget_bytes = 10 * kMiB}, {.budget_bytes = 5 * kMiB}}}},
                   100 * kMiB, "nothing fits");
  EXPECT_THAT(svg, HasSubstr(">no budget has a plan</text>"));
  EXPECT_THAT(svg, HasSubstr("0 of 2 budgets have a plan"));
  EXPECT_THAT(svg, Not(HasSubstr("<polyline")));
  EXPECT_EQ(Count(svg, "<path class=\"infeasible\""), 2);
}

TEST(SweepPlotLayoutTest, TextDoesNotCollide) {
  testing::ExpectTextDoesNotCollide(SweepPlotSvg(Sweep(), 100 * kMiB, "hybrid: resnet18"));
  testing::ExpectTextDoesNotCollide(
      SweepPlotSvg({{"swap", {{.budget_bytes = 3 * kMiB}}}}, 0, "one budget, no plan"));
  // Every policy at once: the legend takes two rows.
  std::vector<SweepPlotSeries> every;
  for (const char* policy :
       {"none", "swap", "recompute", "swap-lms", "hybrid-seed", "hybrid-seed-lms", "hybrid"}) {
    every.push_back({policy, Sweep().front().points});
  }
  const std::string svg = SweepPlotSvg(every, 100 * kMiB, "every policy");
  EXPECT_EQ(Count(svg, "class=\"legend\""), 10);
  testing::ExpectTextDoesNotCollide(svg);
}

TEST(SweepPlotRenderTest, RsvgConvertRendersNonBlankPngs) {
  if (!testing::HaveRsvgConvert()) GTEST_SKIP() << testing::kNoRsvgConvert;
  testing::ExpectRendersNonBlank(SweepPlotSvg(Sweep(), 100 * kMiB, "hybrid \u2014 rendered"),
                                 "sweep_plot_test");
}

}  // namespace
}  // namespace spillway::sim
