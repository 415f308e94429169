// Proves, without running anything, that a Program is safe to execute:
//
// - structure: every id is in range, each instruction kind is on a stream that
//   can run it, every graph node is computed exactly once;
// - events: each is recorded once, and only waited on after it is recorded in
//   program order (so the event graph has no cycle);
// - residency: every instruction that touches a device buffer runs after its
//   alloc and before its free, and every read follows a completed write
//   (fetches awaited, recomputations done); a fetch reads a host copy whose
//   spill has completed;
// - memory: every non-persistent device buffer is allocated once and freed
//   once after its last use (graph outputs may stay), lies inside the arena
//   at a multiple of the Program's alignment, and shares no byte with another
//   buffer unless one is freed before the other is allocated;
// - the step's guarantees: no copy after the first update (the commit point),
//   and every graph output still in the buffer its producer wrote at the end.
// A Program that verifies is one the runtime runs; the runtime adds only the
// checks that depend on where it runs (the budget, the machine's memory, the
// backend's alignment).
//
// "Before" is happens-before: stream order plus event waits, computed with
// vector clocks over the three streams. A free does not hold up its stream
// (program.h), so it orders only what waits on the event it records.
#pragma once

#include "absl/status/status.h"
#include "program/program.h"

namespace spillway::program {

// The first violation found, naming the instruction, buffer and rule.
absl::Status VerifyProgram(const Program& program);

}  // namespace spillway::program
