// From a training graph and a Plan to a Program, in two passes:
//
// 1. `Rewrite` emits the instructions and nothing else (it is kept dumb: the
//    Plan has made every decision). The compute stream runs the schedule; a
//    spilled tensor is copied to host memory on the d2h stream right after it
//    is produced and fetched back on the h2d stream before the Plan's fetch
//    step (and fetched again after the step it is dropped at, if the Plan
//    drops it between reads); a recomputed tensor is re-run, from whatever
//    is resident, right before the first instruction that needs it. Every
//    device buffer is freed right after its last access.
// 2. `AssignArena` places every device buffer in one arena with a heap
//    algorithm, in program order, and makes each reuse of arena bytes an
//    event dependency: an alloc waits on the free of the buffer that held its
//    bytes before.
//
// `BuildProgram` runs both, laying the arena out with two strategies and
// keeping the smaller. The result satisfies program/verifier.h.
#pragma once

#include <climits>
#include <limits>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "program/memory_layout.h"
#include "program/plan.h"
#include "program/program.h"
#include "program/schedule.h"

namespace spillway::program {

// When each value is read in a schedule: the analysis the rewriter and the
// planner both start from.
struct ScheduleReads {
  static constexpr int kNever = INT_MAX;
  std::vector<int> step_of_node;
  std::vector<int> last_read;            // -1: nothing reads it
  std::vector<int> last_forward_read;    // -1: no forward node reads it
  std::vector<int> first_backward_read;  // first backward or update reader; kNever: none

  static ScheduleReads Of(const ir::Graph& graph, const std::vector<ir::NodeId>& schedule);
};

// What a rewrite depends on besides the Plan: the schedule, when it reads
// each value, each value's bytes, and the scratch buffer each node's kernel
// declares (indexed by node id, ScratchBytesByNode in program/workspaces.h;
// empty for none), which each compute or recompute of that node gets,
// allocated just before the instruction and freed just after it. A planner
// rewrites thousands of candidate Plans of one graph and schedule, so it
// makes this once.
struct RewriteSetup {
  std::vector<ir::NodeId> schedule;
  ScheduleReads reads;
  std::vector<int64_t> value_bytes;  // by value id
  std::vector<int64_t> scratch_bytes;
  // By value id, what a Plan may do with it (plan.h's CanSpill,
  // CanSpillBetweenReads and CanRecompute): asked once per planning rather
  // than for every value of every candidate.
  std::vector<bool> can_spill;
  std::vector<bool> can_spill_between_reads;
  std::vector<bool> can_recompute;
  // By value id, a number equal for two values exactly when their types are
  // (a donation needs an input of the output's type): compared from one
  // array, where reading the graph's values missed the cache.
  std::vector<int32_t> type_class;
  // By step, the scheduled node's op, inputs and outputs, each list in one
  // array (step s's inputs are inputs[input_begin[s] .. input_begin[s + 1]]):
  // a rewrite reads them step by step, where the graph's nodes and their
  // lists lie scattered in memory (their cache misses were most of a
  // rewrite's time on the 48-layer GPT-2).
  std::vector<ir::OpKind> op;
  std::vector<int> input_begin;   // one per step, and the end
  std::vector<int> output_begin;  // one per step, and the end
  std::vector<ir::ValueId> inputs;
  std::vector<ir::ValueId> outputs;

  static RewriteSetup Of(const ir::Graph& graph, std::vector<ir::NodeId> schedule,
                         std::vector<int64_t> scratch_bytes = {});
};

// Errors: the Plan spills or recomputes a value that cannot be (named).
absl::StatusOr<Program> Rewrite(const ir::Graph& graph, const RewriteSetup& setup,
                                const Plan& plan);
// The same with a setup made for this one rewrite.
absl::StatusOr<Program> Rewrite(const ir::Graph& graph, std::vector<ir::NodeId> schedule,
                                const Plan& plan, std::vector<int64_t> scratch_bytes = {});

void AssignArena(Program& program, HeapAlgorithm& heap);

// AssignArena in two halves: the layout a heap algorithm gives the Program's
// allocs and frees, and applying a layout (offsets, arena size, reuse waits).
//
// `release_before`, when given, has one entry per buffer: an entry k >= 0
// hands the buffer's bytes back to the heap just before instruction k (which
// must come after its Free), so that no buffer allocated before k takes them;
// -1, or no entry, hands them back at the Free itself.
HeapLayout LayOut(const Program& program, HeapAlgorithm& heap,
                  std::span<const int> release_before = {});
void ApplyLayout(Program& program, const HeapLayout& layout);

// BuildProgram's second half: lays out a rewritten Program's arena, by online
// best fit where that arena is at most `enough_bytes`, else by largest-first
// where that is smaller. With `release_before` it lays out first with those
// later releases (by online best fit where that fits without them, else
// largest-first) and keeps them if their arena is at most `enough_bytes`.
//
// A caller that has no use for an arena past `useless_above` (a planner
// rejects a candidate that neither fits nor is the smallest it has seen) lets
// the largest-first layout without releases give up once its arena passes
// `useless_above` plus one alignment; the Program then keeps the online best
// fit. Either way its arena is the same as with no limit or is itself past
// `useless_above`, so such a caller decides exactly as it would without one.
void LayOutArena(Program& program, int64_t enough_bytes = 0,
                 std::span<const int> release_before = {},
                 int64_t useless_above = std::numeric_limits<int64_t>::max());

// The most device bytes allocated at once, in program order: no layout's
// arena is smaller.
int64_t LiveBytesPeak(const Program& program);
// The step at which that peak is first reached.
int LiveBytesPeakStep(const Program& program);

// Rewrite, then the smaller of the BestFitHeap and DecreasingSizeBestFitHeap
// layouts. When the best-fit arena is at most `enough_bytes`, the second
// layout is skipped (a planner that only needs the plan to fit saves time).
absl::StatusOr<Program> BuildProgram(const ir::Graph& graph,
                                     const std::vector<ir::NodeId>& schedule, const Plan& plan,
                                     int64_t enough_bytes = 0);

}  // namespace spillway::program
