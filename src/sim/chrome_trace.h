// Exports a simulated step as a Chrome trace (the Trace Event Format JSON that
// Perfetto, chrome://tracing and Speedscope open), so a plan can be inspected
// on a timeline: where the compute stream stalls on a fetch, how the copies
// overlap, how device memory rises and falls.
//
// Layout of the trace:
// - one process, named `title`, with one track per stream, in stream order:
//   "compute", "d2h (device to host)", "h2d (host to device)";
// - one complete event ("X") per compute, recompute and copy instruction, on
//   its stream's track: computes are named after their node, recomputes
//   "recompute <node>", copies after the buffer they write. "cat" is the
//   instruction kind ("compute", "copy_to_host", ...); "args" hold the bytes
//   (written by a compute, copied by a copy), the schedule step, and for
//   computes and recomputes the op;
// - one thread-scoped instant event ("i") per alloc and free, named
//   "alloc <buffer>" / "free <buffer>" on its stream's track: they take no
//   time, but seeing where a fetch buffer is allocated explains a stall;
// - a counter track "device memory" with the allocated bytes after every
//   change (args key "allocated").
// Times are in microseconds, the format's unit, rounded to whole nanoseconds;
// "otherData" carries the step time, the peak and the copied bytes.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "program/program.h"
#include "sim/simulator.h"

namespace spillway::sim {

// `result` must come from simulating `program` (one timing per instruction).
// The JSON has one event a line, so large traces stay greppable and diffable.
std::string ChromeTraceJson(const program::Program& program, const SimulationResult& result,
                            std::string_view title);

// One timeline of a trace with several: its process's name and its timings
// (simulated, or measured and accounted by Simulator::Account).
struct TraceProcess {
  std::string_view title;
  const SimulationResult* result = nullptr;
};

// Several timelines of one Program side by side, one process each (pid 1, 2,
// ... in the order given), laid out as above: a measured step beside the
// simulator's prediction of it, on the same time axis. "otherData" carries
// the first timeline's figures as above and, under "processes", every
// timeline's (its title, step time, peak and copied bytes).
std::string ChromeTraceJson(const program::Program& program,
                            std::span<const TraceProcess> processes);

}  // namespace spillway::sim
