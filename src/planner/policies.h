// The five policies; docs/planner.md says what each must do, how it does it
// and why.
#pragma once

#include <string_view>
#include <vector>

#include "planner/chain_checkpointing.h"
#include "planner/planner.h"

namespace spillway::planner {

// Everything kept: the ideal step time, and the arena the step really needs.
class NonePolicy final : public Policy {
 public:
  std::string_view name() const override { return "none"; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;
};

// The options of SwapPolicy: the constants of its search, named, with their defaults.
struct SwapOptions {
  // The lookahead is tuned for the largest threshold that fits and for
  // `thresholds_tuned - 1` thresholds below it.
  int thresholds_tuned = 3;
};

// Swap-only, as IBM's TensorFlow Large Model Support v2 does it: spill every
// saved tensor whose first backward reader is more than `threshold`
// topological levels after its producer, fetch it back when the backward pass
// reaches `ahead` levels before that reader, and tune both by simulation.
class SwapPolicy final : public Policy {
 public:
  using Options = SwapOptions;
  explicit SwapPolicy(Options options = {}) : options_(options) {}
  std::string_view name() const override { return "swap"; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

  // The plan for one setting, for tests and for hybrid-seed.
  static program::Plan PlanFor(const PlanningContext& context, int threshold, int ahead);

 private:
  Options options_;
};

// The options of RecomputePolicy: the constants of its search, named, with their defaults.
struct RecomputeOptions {
  // Segment byte limits scanned, on a geometric grid from the smallest
  // recomputable tensor to all of them together.
  int segment_grid_points = 24;
  // The chain's optimum is also tried at every `chain_every`-th grid point
  // (the dynamic program costs more than a greedy pass), with the chain
  // model's peak allowed `chain_peak_factor` times that point's limit.
  int chain_every = 3;
  double chain_peak_factor = 2.0;
  // Chains longer than this are solved on a grid of segment sizes with a
  // capped frontier instead of exactly.
  size_t exact_chain_length = 64;
  ChainOptions long_chain{.segment_candidates = 12, .max_frontier = 16};
  // Plans that rebuild only cheap tensors (CheapCheckpoints with no segments)
  // are tried for this many shares of them: 1/n, 2/n, ..., all.
  int cheap_shares = 16;
};

// Recomputation only: Chen et al.'s checkpoints — every sqrt(n)-th saved
// tensor, or wherever the running segment would exceed a byte limit — and the
// chain-optimal checkpoints of chain_checkpointing.h; the byte limit is
// scanned by simulation for the fastest plan that fits.
class RecomputePolicy final : public Policy {
 public:
  using Options = RecomputeOptions;
  explicit RecomputePolicy(Options options = {}) : options_(options) {}
  std::string_view name() const override { return "recompute"; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

  static program::Plan SqrtCheckpoints(const PlanningContext& context);
  static program::Plan SegmentCheckpoints(const PlanningContext& context, int64_t segment_bytes);
  // Finer: tensors of memory-bound ops (batch norm, activation, add,
  // pooling) rebuilt from what they read — the `cheap_share` of them with the
  // most bytes per second of rebuild — and the convolution and matrix-product
  // tensors checkpointed among themselves by SegmentCheckpoints' greedy (a
  // limit of 0 keeps them all).
  static program::Plan CheapCheckpoints(const PlanningContext& context, int64_t segment_bytes,
                                        double cheap_share);
  // The checkpoints that SolveChain (chain_checkpointing.h) finds optimal for
  // the saved tensors read as a chain, under `chain_limit_bytes` of the chain
  // model's peak.
  static program::Plan ChainCheckpoints(const PlanningContext& context, int64_t chain_limit_bytes,
                                        const Options& options = {});

 private:
  Options options_;
};

// The paper's heuristic (Imai et al., IEEE BigData 2020) as docs/planner.md
// reads it: from the tuned swap plan, units that begin at a convolution or matrix
// product, ranked by the bytes they swap; a unit's spilled non-checkpoint
// tensors switch to recomputation when that makes the step faster and fits.
class HybridSeedPolicy final : public Policy {
 public:
  std::string_view name() const override { return "hybrid-seed"; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

  // Run's second half: the unit refinement of a swap policy's result (Run
  // makes one with the default options; hybrid shares its own).
  static absl::StatusOr<PlanResult> RecomputeUnits(PlanningContext& context, PlanResult swap);
};

// The options of HybridPolicy: the constants of its search, named, with their defaults.
struct HybridOptions {
  // The cap on how early fetches may be issued is searched by this many
  // bisection steps on a log scale, the first at this fraction of the
  // backward pass.
  int lead_cap_bisections = 8;
  double lead_cap_first_fraction = 1.0 / 16;
  // A refinement move is kept only if it makes the step at least this
  // fraction faster: moves that shave microseconds off a second-long step
  // each cost a full evaluation and together make no difference.
  double min_gain = 1e-4;
  // The race between the refinements of the portfolio's starts: in its first
  // round each refinement considers this many candidate plans, in each later
  // round twice as many as in the one before (0: no race, every start is
  // refined until it converges). After a round a refinement stays in the
  // race if it holds the best plan, or if gaining this many times what it
  // gained in that round would make it the best (infinity: every refinement
  // runs to its end, taking turns).
  int race_first_quota = 100;
  double race_gain_credit = 1.0;
};

// Spillway's planner: a portfolio of starting plans (its own eviction by bytes
// saved per second of cost that cannot be hidden, and the plans of `swap`,
// `hybrid-seed` and `recompute`), the best of them refined per tensor with
// the simulator in the loop on what stalls the compute stream until no move
// improves it. Never slower than any policy of the portfolio.
class HybridPolicy final : public Policy {
 public:
  using Options = HybridOptions;
  explicit HybridPolicy(Options options = {}) : options_(options) {}
  std::string_view name() const override { return "hybrid"; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

 private:
  Options options_;
};

// Topological levels of the training graph: graph inputs are at level 0 and a
// node is one level above its deepest input (TFLMS's measure of distance).
std::vector<int> TopologicalLevels(const ir::Graph& graph, const std::vector<ir::NodeId>& schedule);

}  // namespace spillway::planner
