// A Plan: for every saved tensor of a training graph, whether it stays on the
// device, is spilled to host memory and fetched back, or is recomputed. It is
// what a policy decides and what the rewriter (program/rewriter.h) turns into
// a Program; it holds no timing and no layout.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace spillway::program {

enum class Decision : uint8_t { kKeep, kSpill, kRecompute };
std::string_view DecisionName(Decision decision);  // "keep", "spill", "recompute"
std::optional<Decision> ParseDecision(std::string_view name);

// The node attribute that pins the decision for a node's first output, for
// tests and for users who know better: memory = "keep" | "spill" | "recompute".
inline constexpr std::string_view kMemoryAttr = "memory";

struct TensorPlan {
  Decision decision = Decision::kKeep;
  // Spill only: the schedule step before which the fetch back is issued on the
  // host-to-device stream. -1 issues it just in time, before the first step
  // that needs the tensor back.
  int fetch_step = -1;
  // Spill only: the schedule step after which the fetched copy is dropped,
  // although later steps read the value too; the first of those fetches it
  // again, just in time. -1 keeps the fetched copy to the value's last read.
  // A second fetch moves the bytes twice, and lets the device hold something
  // else in between (for a residual block's input, read by its weight
  // gradients and again by the activation's backward after the input
  // gradients).
  int refetch_after = -1;

  friend bool operator==(const TensorPlan&, const TensorPlan&) = default;
  template <typename H>
  friend H AbslHashValue(H state, const TensorPlan& plan) {
    return H::combine(std::move(state), plan.decision, plan.fetch_step, plan.refetch_after);
  }
};

class Plan {
 public:
  Plan() = default;
  // Everything kept.
  Plan(std::string policy, const ir::Graph& graph)
      : policy_(std::move(policy)), tensors_(static_cast<size_t>(graph.num_values())) {}

  const std::string& policy() const { return policy_; }
  void set_policy(std::string policy) { policy_ = std::move(policy); }

  const TensorPlan& at(ir::ValueId value) const { return tensors_.at(static_cast<size_t>(value)); }
  Decision decision(ir::ValueId value) const { return at(value).decision; }
  void Keep(ir::ValueId value) { tensors_.at(static_cast<size_t>(value)) = {}; }
  void Spill(ir::ValueId value, int fetch_step = -1, int refetch_after = -1) {
    tensors_.at(static_cast<size_t>(value)) = {Decision::kSpill, fetch_step, refetch_after};
  }
  void Recompute(ir::ValueId value) {
    tensors_.at(static_cast<size_t>(value)) = {Decision::kRecompute, -1, -1};
  }
  size_t size() const { return tensors_.size(); }
  // The values not simply kept, with what the plan does with them, by
  // value: two plans of one graph with the same changes are the same plan.
  std::vector<std::pair<ir::ValueId, TensorPlan>> Changes() const;

  // How many values have each decision.
  int Count(Decision decision) const;
  // How many spilled values are dropped between two reads and fetched again
  // (TensorPlan::refetch_after): a forward value's second fetch, a
  // gradient's only one.
  int CountRefetched() const;

 private:
  std::string policy_;
  std::vector<TensorPlan> tensors_;  // indexed by value id
};

// Whether a value may be recomputed: it is produced by a forward node, it is
// that node's first output (statistics and in-place outputs are not), and the
// op is safe to re-run (everything but the loss; dropout replays its seed,
// batch norm re-normalizes with the saved statistics).
bool CanRecompute(const ir::Graph& graph, ir::ValueId value);

// Whether a value may be spilled: produced by a forward node and not written
// in place over an input.
bool CanSpill(const ir::Graph& graph, ir::ValueId value);

// Whether a value may be spilled between two of its reads (Plan::Spill with
// refetch_after): a forward activation, or a gradient that is not a result
// of the step (a residual's gradient, which the block's input gradient reads
// again after the whole branch), copied out when it is made, dropped after
// the plan's step and fetched again just in time.
bool CanSpillBetweenReads(const ir::Graph& graph, ir::ValueId value);

// A node's pin (kMemoryAttr): the decision every plan must make for its
// output.
struct Pin {
  ir::ValueId value = ir::kInvalidValue;
  Decision decision = Decision::kKeep;
};

// The pins of the graph, in node order. Errors name the node whose pin is
// unknown or impossible (recomputing what cannot be). A planner reads them
// once and applies them to every candidate: looking each node's attributes
// up by name per candidate was a few percent of planning.
absl::StatusOr<std::vector<Pin>> ReadPins(const ir::Graph& graph);
void ApplyPins(std::span<const Pin> pins, Plan& plan);

// Both at once, for one plan.
absl::Status ApplyPins(const ir::Graph& graph, Plan& plan);

}  // namespace spillway::program
