// The policies (seven heuristics and the exact one); docs/planner.md says what each must do, how it
// does it and why.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "planner/chain_checkpointing.h"
#include "planner/planner.h"

namespace spillway::planner {

// Everything kept: the ideal step time, and the arena the step really needs.
class NonePolicy final : public Policy {
 public:
  std::string_view name() const override { return "none"; }
  bool needs_host_link() const override { return false; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;
};

// The options of SwapPolicy: the constants of its search, named, with their defaults.
struct SwapOptions {
  // The lookahead is tuned for the largest threshold that fits and for
  // `thresholds_tuned - 1` thresholds below it.
  int thresholds_tuned = 3;
  // Where spilling everything does not fit, at most this many rounds of
  // fetching again the tensors held across the memory peak between reads.
  int refetch_rounds = 16;
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
  bool needs_host_link() const override { return true; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

  // The plan for one setting, for tests and for hybrid-seed.
  static program::Plan PlanFor(const PlanningContext& context, int threshold, int ahead);

 private:
  Options options_;
};

// The options of SwapLmsPolicy: TFLMS v2's own constants.
struct SwapLmsOptions {
  // Its memory simulator's budget: (device memory - bytes of the trainable
  // parameters) x this ratio (TFLMS reads TF_LMS_SIMULATOR_MEM_RATIO; 0.9).
  // The planner's budget plays the device memory (TFLMS's autotune_gpu_mem).
  double memory_ratio = 0.9;
  // A swap-in's trigger is searched at most this many levels back (TFLMS: 10).
  int trigger_search_levels = 10;
};

// A TFLMS v2 setting: what its auto-tuning chooses.
struct LmsSetting {
  // A tensor is swapped out if a consumer is more than this many levels after
  // its producer; those consumers read it from its swap-in.
  int threshold = 1;
  // The swap-in is triggered by an op more than this many levels before the
  // earliest of those consumers.
  int ahead = 1;
  // 0 asynchronous; 1 synchronous swap-out; 2 synchronous swap-in; 3 both.
  int sync_mode = 0;
};

// TFLMS v2 (IBM's graph-editing Large Model Support for TensorFlow 1.x) as it
// sees a training graph: topological levels, the tensors a setting swaps,
// the op that triggers each swap-in, its memory simulator and its
// auto-tuning, each as its documentation and code describe them
// (docs/planner.md has the reading, and where Spillway's Plans depart).
class LmsModel {
 public:
  explicit LmsModel(const PlanningContext& context, SwapLmsOptions options = {});

  int levels() const { return levels_; }  // TFLMS's `size`: the highest level + 1
  int level(ir::NodeId node) const { return level_[static_cast<size_t>(node)]; }
  int64_t budget_bytes() const { return budget_bytes_; }

  // The tensors a setting swaps out, in value order.
  std::vector<ir::ValueId> Swapped(int threshold) const;
  // The node whose completion triggers the swap-in of a swapped tensor, or
  // kNoNode when the search finds none (the swap-in then runs just in time).
  ir::NodeId Trigger(ir::ValueId value, const LmsSetting& setting) const;
  // Whether TFLMS's memory simulator runs the step within its budget.
  bool Fits(const LmsSetting& setting) const;

  struct Tuning {
    LmsSetting setting;
    bool swaps = false;  // false: the graph fits unswapped, LMS stays off
    bool fits = false;   // false: even threshold 1 with sync_mode 3 fails
  };
  // TFLMS's auto-tuning: no swapping if that fits; else sync_mode raised from
  // 0 until threshold 1 fits, the largest threshold by bisection, then (with
  // asynchronous swap-ins) the largest `ahead` by bisection.
  Tuning Tune() const;

  // A setting as a Spillway Plan: each swapped tensor spilled and fetched
  // after its trigger (just in time with synchronous swap-ins or no trigger).
  program::Plan PlanFor(const LmsSetting& setting) const;

 private:
  struct Candidate {
    ir::ValueId value = 0;
    ir::NodeId producer = ir::kNoNode;
    std::vector<ir::NodeId> consumers;  // every reader, by level
  };
  // The consumers more than `threshold` levels after the producer.
  std::vector<ir::NodeId> Far(const Candidate& candidate, int threshold) const;
  // Trigger's work, for a tensor whose far consumers are known (not empty).
  ir::NodeId TriggerOf(const Candidate& candidate, const std::vector<ir::NodeId>& far,
                       const LmsSetting& setting) const;
  ir::NodeId SearchTrigger(const Candidate& candidate, ir::NodeId consumer, int ahead) const;
  // The first node at or below `level` on the chain from `node` through each
  // node's highest-level data input (kNoNode if the chain ends first).
  ir::NodeId ChainAncestor(ir::NodeId node, int level) const;

  const PlanningContext& context_;
  SwapLmsOptions options_;
  std::vector<int> level_;
  int levels_ = 0;
  int64_t budget_bytes_ = 0;
  std::vector<ir::NodeId> order_;               // level by level, schedule order within
  std::vector<std::vector<ir::NodeId>> users_;  // readers of every value
  std::vector<int> candidate_of_value_;         // -1: not a candidate
  // jump_[k][n]: the node 2^k steps down n's chain of highest-level data
  // inputs (kNoNode past its end), so a trigger search costs O(log levels).
  std::vector<std::vector<ir::NodeId>> jump_;
  std::vector<Candidate> candidates_;
};

// TFLMS v2 as a policy: its auto-tuned setting, judged by its own simulator,
// then rewritten, laid out and simulated like every other plan, so a plan
// that TFLMS believes fits but whose arena does not is reported infeasible.
class SwapLmsPolicy final : public Policy {
 public:
  using Options = SwapLmsOptions;
  explicit SwapLmsPolicy(Options options = {}) : options_(options) {}
  std::string_view name() const override { return "swap-lms"; }
  bool needs_host_link() const override { return true; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

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
  int cheap_shares = 32;
  // Plans that rebuild whole blocks between forward cuts (BlockCheckpoints)
  // are tried for this many shares of the blocks: 1/n, 2/n, ..., all.
  int block_shares = 16;
  // Passes of keeping back: from the plan that rebuilds every block (or the
  // fastest plan that fits, where that one does not), the rebuilt tensors
  // are tried kept, the most rebuild time per byte first, in groups that
  // double while they succeed and halve when they fail, and stay kept if the
  // plan still fits and is faster. The families above move in
  // steps (a share of blocks, a grid point); this fills the budgets between
  // two of their plans, where the faster one does not fit yet. 0: none.
  int keep_back_passes = 1;
};

// Recomputation only: Chen et al.'s checkpoints — every sqrt(n)-th saved
// tensor, or wherever the running segment would exceed a byte limit — the
// chain-optimal checkpoints of chain_checkpointing.h, cheap tensors rebuilt
// first, and checkpoints only at forward cuts (whole blocks or segments of
// them); the byte limit is scanned by simulation for the fastest plan that
// fits.
class RecomputePolicy final : public Policy {
 public:
  using Options = RecomputeOptions;
  explicit RecomputePolicy(Options options = {}) : options_(options) {}
  std::string_view name() const override { return "recompute"; }
  bool needs_host_link() const override { return false; }
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
  // SegmentCheckpoints' greedy with checkpoints only where one tensor cuts the
  // forward pass (nothing else made before it is read after it: a residual
  // block's output, not a tensor inside the block, whose shortcut would make
  // rebuilding the block's end rebuild everything back to the previous cut).
  // Every other recomputable tensor is rebuilt.
  static program::Plan CutCheckpoints(const PlanningContext& context, int64_t segment_bytes);
  // Between the two: the forward pass read as blocks, each ending at a cut
  // tensor (which stays). The `block_share` of the blocks with the most
  // bytes per second of rebuild have every tensor rebuilt from the cut
  // before them; the others rebuild only their cheap tensors, from what
  // they keep. The share moves the plan from CheapCheckpoints' memory and
  // time to CutCheckpoints'.
  static program::Plan BlockCheckpoints(const PlanningContext& context, double block_share);
  // The checkpoints that SolveChain (chain_checkpointing.h) finds optimal for
  // the saved tensors read as a chain, under `chain_limit_bytes` of the chain
  // model's peak.
  static program::Plan ChainCheckpoints(const PlanningContext& context, int64_t chain_limit_bytes,
                                        const Options& options = {});

  // What Run does after its families (Options::keep_back_passes): replaces
  // `best`, a plan that fits, with the plan kept back from the one that
  // rebuilds every block (or from `best` where that does not fit), if that
  // is faster. True if the wall-clock safety net stopped it. `hybrid` races
  // the families' plan and this one as two starts.
  absl::StatusOr<bool> ImproveByKeepingBack(PlanningContext& context, Evaluation& best) const;

 private:
  // Options::keep_back_passes over `best`, which fits; true if the
  // wall-clock safety net stopped it.
  absl::StatusOr<bool> KeepBack(PlanningContext& context, Evaluation& best) const;

  Options options_;
};

// The paper's heuristic (Imai et al., IEEE BigData 2020) as docs/planner.md
// reads it: from the tuned swap plan, units that begin at a convolution or matrix
// product, ranked by the bytes they swap; a unit's spilled non-checkpoint
// tensors switch to recomputation when that makes the step faster and fits.
class HybridSeedPolicy final : public Policy {
 public:
  std::string_view name() const override { return "hybrid-seed"; }
  bool needs_host_link() const override { return true; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

  // Run's second half: the unit refinement of a swap policy's result (Run
  // makes one with the default options; hybrid shares its own).
  static absl::StatusOr<PlanResult> RecomputeUnits(PlanningContext& context, PlanResult swap);
};

// The paper's heuristic as the paper ran it: the recompute units of
// TFLMS's own swap plan (swap-lms) instead of Spillway's tuned swap plan.
class HybridSeedLmsPolicy final : public Policy {
 public:
  std::string_view name() const override { return "hybrid-seed-lms"; }
  bool needs_host_link() const override { return true; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;
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
  // The last kind of move, tried when no single decision improves the plan:
  // keep an evicted tensor and rebuild a kept one to make room for it. Each
  // evicted tensor is tried with this many partners (0: no exchanges), the
  // cheapest to rebuild first, among the kept tensors at least as large,
  // alive at the same time, and cheaper to rebuild than the evicted one costs.
  int exchange_partners = 2;
  // Besides its eviction plan for the budget, the portfolio has one for this
  // share of it (0: none, and no kicks), "evict-tight": a start with room
  // to spare, which the refinement fills by keeping back what the budget
  // allows. Without it a larger budget could end in a slower plan than a
  // smaller one (8% on ResNet-18 on the H200): its eviction evicts less,
  // and the refinement stops at a worse local optimum.
  double tight_eviction_share = 0.9;
  // After the race, the best plan is tightened the same way (evicted until
  // its arena fits `tight_eviction_share` of the budget) and refined again,
  // racing the best plan by the race's rule, up to this many times while
  // that makes it faster: the refinement is a local search, and a nearby
  // plan with room to spare lets it leave a local optimum no single move
  // improves (an iterated local search's kick). One took ResNet-152 at
  // 7500x7500 on the V100 from +3.7% to +1.6% over `none`; three gained
  // more only on ResNet-50 at a quarter on the H200 (+102.8% to +100.5%).
  int kicks = 1;
  // Where the kicks made the best plan no faster, one more, gentler (none
  // where `kicks` is 0, or `tight_eviction_share` is): its eviction
  // lays out each round's arena for the share, not for the budget, so that
  // it evicts only what the share needs (laid out for the budget, the arena
  // keeps spilled tensors' bytes until their copies end, and on a slow link
  // a kick evicts far past the share: ResNet-152 at 7500x7500 at a quarter
  // of the H200 went from 2.32 s to 3.54 s before its refinement began).
  // Its refinement stays in the race at least until it has considered as
  // many candidates as the best plan's own refinement took to reach it.
  bool gentle_kick = true;
  // The race between the refinements of the portfolio's starts: in its first
  // round each refinement considers this many candidate plans, in each later
  // round twice as many as in the one before (0: no race, every start is
  // refined until it converges). After a round a refinement stays in the
  // race if it holds the best plan, or if gaining this many times what it
  // gained in that round would make it the best (infinity: every refinement
  // runs to its end, taking turns).
  int race_first_quota = 100;
  double race_gain_credit = 1.0;
  // Where the context asks for it (PlannerOptions::every_backward_order),
  // also plan in each other backward order and keep the fastest plan. The
  // exact policy turns it off for its start: its program is in the context's
  // order.
  bool other_orders = true;
};

// Spillway's planner: a portfolio of starting plans (its own eviction by bytes
// saved per second of cost that cannot be hidden, for the budget and for a
// tighter one, and the plans of `swap`,
// `swap-lms`, `hybrid-seed`, and `recompute` both before and after it keeps
// tensors back), refined per tensor with the
// simulator in the loop on what stalls the compute stream, the refinements
// racing for candidates (HybridOptions). Never slower than any policy of the
// portfolio.
class HybridPolicy final : public Policy {
 public:
  using Options = HybridOptions;
  // A plan made elsewhere for the same training step: a budget sweep passes
  // the plan it made for the budget below (session/sweep.h), which fits
  // this one. After the race and the kicks, each seed is evaluated afresh
  // (its arena laid out for this budget) and refined, racing the best plan
  // as a kick does, and the result is the better of the two: never slower
  // than the plan without seeds, nor than a seed as evaluated here. A seed
  // is used in the backward order whose schedule is its Program's, and named
  // in the race and in PlanResult::start as `name`.
  struct Seed {
    std::string name;
    Evaluation evaluation;
  };
  explicit HybridPolicy(Options options = {}, std::vector<Seed> seeds = {})
      : options_(options), seeds_(std::move(seeds)) {}
  std::string_view name() const override { return "hybrid"; }
  bool needs_host_link() const override { return true; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

 private:
  Options options_;
  std::vector<Seed> seeds_;
};

// The options of OptimalPolicy.
struct OptimalOptions {
  // Stops the solver (not the hybrid planner, which PlannerOptions bounds):
  // the result then says so and keeps the best plan and bound found.
  double solver_time_limit_s = 60;
  // Solve from hybrid's plan: it is the solver's first incumbent, and the
  // result if the relaxation's own plan is slower or does not fit.
  bool start_from_hybrid = true;
  // Also write the integer program here (.lp or .mps), for other solvers.
  std::string model_path;
  // Called as the solver starts (a command shows it on a terminal: the
  // solver reports nothing until it ends).
  std::function<void()> solving = nullptr;
};

// The ruler, not a member of the portfolio: an integer program over every
// tensor's decision (StepRelaxation) solved by CBC. It proves a lower bound on
// the step of every plan that fits, simulates the plan its optimum describes,
// and returns the faster of that plan and hybrid's, with the bound
// (PlanResult::bound). Graphs past the program's limits are refused.
class OptimalPolicy final : public Policy {
 public:
  using Options = OptimalOptions;
  explicit OptimalPolicy(Options options = {}) : options_(std::move(options)) {}
  std::string_view name() const override { return "optimal"; }
  bool needs_host_link() const override { return false; }
  absl::StatusOr<PlanResult> Run(PlanningContext& context) override;

 private:
  Options options_;
};

// Topological levels of the training graph: graph inputs are at level 0 and a
// node is one level above its deepest input (TFLMS's measure of distance).
std::vector<int> TopologicalLevels(const ir::Graph& graph, const std::vector<ir::NodeId>& schedule);

}  // namespace spillway::planner
