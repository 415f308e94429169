// Draws budget sweeps (`spillway sweep --plot`) as a standalone SVG: each
// policy's predicted overhead over the unconstrained step against the
// budget, one marker per budget with a plan, the budgets without one marked
// on the axis, and the arena the step needs with everything kept. It shows
// at a glance how much memory a step within some overhead needs, and how
// the policies compare at every budget.
//
// Self-contained, like the memory plot (sim/memory_plot.h): no scripts, no
// external fonts or styles.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spillway::sim {

struct SweepPlotPoint {
  int64_t budget_bytes = 0;
  bool feasible = false;  // a plan fits this budget
  double overhead = 0;    // feasible: its step over the unconstrained one, less one
  bool carried = false;   // its plan was made at a smaller budget
};

// One policy's sweep: a curve of its own colour, named in the legend.
struct SweepPlotSeries {
  std::string name;
  std::vector<SweepPlotPoint> points;  // in any order
};

// `none_arena_bytes` is what the step needs with everything kept: drawn
// where it is positive and at most 1.5 times the largest budget, else named
// in the subtitle as off the scale. `title` is escaped, so any text is safe.
std::string SweepPlotSvg(std::vector<SweepPlotSeries> series, int64_t none_arena_bytes,
                         std::string_view title);

}  // namespace spillway::sim
