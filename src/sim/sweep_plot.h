// Draws a budget sweep (`spillway sweep --plot`) as a standalone SVG: a
// policy's predicted overhead over the unconstrained step against the budget,
// one marker per budget with a plan, the budgets with none marked on the
// axis, and the arena the step needs with everything kept. It shows at a
// glance how much memory a step within some overhead needs.
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

// `points` in any order; `none_arena_bytes` (drawn where positive) is what
// the step needs with everything kept. `title` is escaped, so any text is
// safe.
std::string SweepPlotSvg(std::vector<SweepPlotPoint> points, int64_t none_arena_bytes,
                         std::string_view title);

}  // namespace spillway::sim
