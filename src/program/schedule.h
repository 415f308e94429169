// The order the compute stream runs a training graph in: a Program's schedule.
//
// Forward and update nodes run in the graph's deterministic topological order
// (the lowest node id among the ready ones first). The backward pass between
// them may be reordered within its dependencies to keep the bytes it holds at
// once small. Reordering changes when memory is used, never what is computed:
// every node reads the same values, and gradient contributions are summed by
// nodes of the graph (add, add_n) whose operands do not depend on the order, so
// every valid order trains bitwise alike.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace spillway::program {

enum class BackwardOrder {
  // The graph's topological order: the backward pass as autodiff emitted it,
  // which visits each forward node's gradient in reverse, every contribution
  // of a branch before the next branch.
  kTopological,
  // A greedy list schedule over the backward pass (MemoryAwareBackwardOrder).
  kMemoryAware,
  // The same list schedule looking two nodes ahead: for the least memory,
  // where the plan fetches tensors twice (MemoryAwareBackwardOrder).
  kLookahead,
};

// "topological", "memory-aware", "lookahead"
std::string_view BackwardOrderName(BackwardOrder order);
std::optional<BackwardOrder> ParseBackwardOrder(std::string_view name);  // nullopt: not one

// The schedule of a training graph (forward, backward, update); the backward
// pass in `order`. A graph whose backward nodes do not form one block of the
// topological order (a hand-written graph file, say) keeps that order.
std::vector<ir::NodeId> TrainingSchedule(const ir::Graph& graph,
                                         BackwardOrder order = BackwardOrder::kMemoryAware);

// The memory-aware backward order: a list schedule that, among the backward
// nodes whose inputs are ready, runs next the one that needs the fewest new
// bytes while it runs (its outputs, none for an output written over a dying
// input as the rewriter donates it, plus the saved tensors it is the first to
// read); among equals the one that leaves the fewest bytes behind once it has
// run (less the values it is the last to read); then the one that brings back
// fewer saved bytes; then the earliest in the topological order. It counts
// the step as a plan that keeps nothing it need not: a forward value (a saved
// tensor) is on the device only from its first backward read to its last, a
// backward value from its producer to its last reader. Values read after the
// backward pass (weight gradients, graph outputs) count as never freed;
// parameters and other graph inputs are always resident and count nothing.
//
// It lowers the peak where autodiff's order finishes one branch before
// starting the next: in a downsampling residual block autodiff computes the
// shortcut's input gradient first and holds it while the main branch runs;
// here both branches' input gradients and their sum come first, and the
// block's input comes back for the weight gradients after them. It is greedy
// and can also raise a peak (it runs what needs least now, whatever that
// holds later), which is why the planner checks it before using it
// (planner::ChooseBackwardOrder).
//
// With `look_ahead` (BackwardOrder::kLookahead) it counts the step as a plan
// that fetches a saved tensor for each read and drops it after
// (program::TensorPlan::refetch_after), and looks at each ready node
// together with the node ready after it that grows least (the bytes it
// leaves behind; among equals the fewest new bytes): it runs next the node
// whose pair adds the fewest bytes at once (its own new bytes, or its growth
// plus the next node's new bytes), then the pair that grows least, then the
// least growth of its own, the fewest new bytes, the fewest saved bytes
// brought back and the topological order, each byte count equal to another
// within 1/1024 of the larger (a weight gradient's few bytes must not
// decide). The second step sees that a weight
// gradient, which adds almost nothing, lets the next node free its incoming
// gradient, or that a batch norm's backward, which adds nothing either (it
// writes over its incoming gradient), leaves the other branch's gradient
// waiting beside its own. In a downsampling block it runs the weight
// gradients before the input gradients, which (the second one adding into
// the first's buffer, autodiff's accumulation) then run without the block's
// input: the least memory on ResNets. Without second fetches it holds the
// block's input longer than the one-step order, so the planner uses it only
// where the budget needs it (planner::ChooseBackwardOrder).
//
// Cost: O(backward nodes x ready nodes x inputs), and with `look_ahead` times
// the ready nodes again. The ready set stays small in layered networks (a few
// nodes per layer).
std::vector<ir::NodeId> MemoryAwareBackwardOrder(const ir::Graph& graph,
                                                 const std::vector<ir::NodeId>& block,
                                                 bool look_ahead = false);

}  // namespace spillway::program
