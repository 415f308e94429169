// Fetching a spilled tensor twice (program::TensorPlan::refetch_after): where
// spilling everything still does not fit, what holds the memory peak is often
// a tensor waiting between two of its readers. In the forward pass, a branch's
// result waiting for the other branch (a residual block's main path while the
// shortcut runs); in the backward pass, a tensor fetched back for a reader
// before the peak and needed again after it (a block's input, read by the
// weight gradients and, after the input gradients, by the activation's
// backward). Dropped after its last read before the peak and fetched again
// for the next one, it leaves the peak; the bytes cross the link once more.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "program/plan.h"
#include "program/program.h"
#include "program/rewriter.h"

namespace spillway::planner {

class PeakRefetcher {
 public:
  // `host_link`: whether anything may be spilled at all.
  PeakRefetcher(const ir::Graph& graph, const std::vector<ir::NodeId>& schedule, bool host_link);

  // `plan` with every tensor that `program` (its Program) holds across its
  // memory peak without reading it there dropped after its last read before
  // the peak, spilled if it was kept; nullopt when there is none. A tensor is
  // dropped once: one already dropped, or recomputed, is left as it is.
  std::optional<program::Plan> DropAcrossPeak(const program::Plan& plan,
                                              const program::Program& program) const;

  // Rounds of DropAcrossPeak from `start`, while the arena does not grow (a
  // round that lowers one of several equal peaks leaves it where it was), at
  // most `rounds` of them and until `fits`: the evaluation with the smallest
  // arena. `Evaluation` is anything with `plan`, `program` and `arena_bytes()`.
  template <typename Evaluation>
  absl::StatusOr<Evaluation> Lower(
      Evaluation start, int rounds,
      const std::function<absl::StatusOr<Evaluation>(program::Plan)>& evaluate,
      const std::function<bool(const Evaluation&)>& fits) const {
    Evaluation best = start;
    Evaluation current = std::move(start);
    for (int round = 0; round < rounds && !fits(current); ++round) {
      std::optional<program::Plan> trial = DropAcrossPeak(current.plan, current.program);
      if (!trial) break;
      absl::StatusOr<Evaluation> next = evaluate(*std::move(trial));
      if (!next.ok()) return next.status();
      if (next->arena_bytes() > current.arena_bytes()) break;
      if (next->arena_bytes() < best.arena_bytes()) best = *next;
      current = *std::move(next);
    }
    return best;
  }

 private:
  const ir::Graph& graph_;
  bool host_link_;
  program::ScheduleReads reads_;
  std::vector<std::vector<int>> read_steps_;  // per value: the steps that read it, in order
};

}  // namespace spillway::planner
