// Draws a simulated step's device memory as a standalone SVG: allocated bytes
// over time as a filled step function, against the budget the plan had to
// respect and, when it differs, the arena the Program actually reserved. It is
// the quickest way to see where a plan runs close to the budget and why.
//
// The SVG is self-contained (no scripts, no external fonts or styles) so it
// can be attached to a report or opened by any browser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sim/simulator.h"

namespace spillway::sim {

// `title` is shown at the top (say, the workload and the policy); it is
// escaped, so any text is safe. A budget or arena of zero or less is not
// drawn. Curves with more points than the plot has room for are reduced to
// the maximum of each pixel column, so the peak always shows, at its height.
std::string MemoryPlotSvg(const SimulationResult& result, int64_t budget_bytes, int64_t arena_bytes,
                          std::string_view title);

}  // namespace spillway::sim
