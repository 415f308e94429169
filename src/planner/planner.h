// Policies: each turns a training graph, a budget and a cost model into a
// Plan, and the Plan into a verified Program that the simulator has timed.
//
// Every policy has the same shape: a class with name() and Run(). They share a
// PlanningContext that builds and times candidate Programs (rewrite, arena,
// simulation), so a policy is only its decisions. The policies and the
// reasoning behind each are in docs/planner.md.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/saved_tensors.h"
#include "ir/graph.h"
#include "program/plan.h"
#include "program/program.h"
#include "program/rewriter.h"
#include "sim/simulator.h"
#include "support/worker_pool.h"

namespace spillway::planner {

struct PlannerOptions {
  int64_t budget_bytes = 0;
  // The order of the backward pass in every plan's schedule
  // (program/schedule.h). Unset, the context chooses (ChooseBackwardOrder).
  std::optional<program::BackwardOrder> backward_order = std::nullopt;
  // hybrid only: plan in every backward order whose schedule differs (the one
  // above, or the context's choice, first) and keep the fastest plan. The
  // other policies plan in the context's order. The local search's result
  // differs between orders by a few percent of the step either way, and no
  // cheaper measure (the floors, the starts' plans) predicts which order
  // wins, so this costs a planning per order (--backward-order each).
  bool every_backward_order = false;
  // False: the device has no link to host memory (--no-link), so nothing can
  // be spilled and only recomputation frees memory. The policies that spill
  // (swap, swap-lms, hybrid-seed, hybrid) refuse to run; none, recompute and
  // optimal plan without spills, and any plan that spills is refused.
  bool host_link = true;
  // Whether a plan may fetch a spilled tensor twice, dropping it between two
  // of its readers (program::TensorPlan::refetch_after): `swap` does at its
  // memory floor, and the backward order may be chosen for it. False
  // (--fetch-once) keeps to the plans the exact policy and the lower bound
  // cover, which fetch each spilled tensor back at most once.
  bool fetch_twice = true;
  // The hybrid planner refines its plan until no move improves it. These stop
  // it earlier: a wall-clock safety net, which makes the plan depend on the
  // machine and is meant never to be reached (the result says when it was),
  // and a number of candidate plans per refinement (0: none), which is part
  // of the algorithm and so gives the same plan on every machine.
  double time_limit_s = 300;
  int max_evaluations = 0;
  // Each refinement runs passes over its moves, every move tried at most once
  // per tensor in a pass, until a pass improves nothing or this many passes
  // have run (0: no limit, full convergence). Also part of the algorithm.
  // Three: a third pass took ResNet-50 at 8000x8000 on the V100 from +9.7%
  // to +6.6% over `none` for 18% more candidates (docs/planner.md).
  int max_refine_passes = 3;
  // Reject candidates by cheap bounds before laying out their arena (see
  // EvaluateIfBetter). Off only to check that the bounds change no decision.
  bool use_bounds = true;
  // Decide a plan the search has examined before in the run from what was
  // found then (see PlanningContext::Examined). Off only to check that it
  // changes no decision.
  bool recall = true;
  // Threads that plan side by side (0: the machine's, at most 8): hybrid's
  // lines of search (Lane), and a list of candidates where a line runs alone
  // (FirstBetter). The plan and its counts do not depend on it.
  int threads = 0;
  // Called after every candidate plan with the number considered so far in
  // this context and its lanes (a command shows it on a terminal during long
  // planning). Lanes on several threads call it one at a time.
  std::function<void(int evaluations)> progress = nullptr;
  // Polled after every candidate plan: true stops the policy, which fails
  // with absl::CancelledError (Ctrl-C in the Python module). Each line of
  // search running side by side (hybrid's) stops at its next candidate, so
  // a few more may be counted after the first that saw it; like progress,
  // it is called by one thread at a time. The exact policy's solver is not
  // polled while it solves.
  std::function<bool()> interrupted = nullptr;
};

// The backward order a context plans in when the options leave it open. Of
// autodiff's order and the memory-aware one, the one whose plan that frees
// the most (every saved tensor spilled; with no host link every recomputable
// one recomputed) has the smaller arena: the greedy order is a heuristic and
// can raise that floor (on DeepLabV3+ and GPT-2 it does), and this keeps the
// lower one. Where neither floor fits `tensor_budget_bytes` (and
// `fetch_twice`), the floors are those of the plans that also fetch twice
// what is held across the peak (as `swap` does there), and the lookahead
// order's joins them: the lowest of the three wins. The lookahead order holds
// more where nothing is fetched twice, so it is not used where it is not
// needed. Two Programs are built to decide, a few more below both floors.
program::BackwardOrder ChooseBackwardOrder(
    const ir::Graph& graph, bool host_link,
    int64_t tensor_budget_bytes = std::numeric_limits<int64_t>::max(), bool fetch_twice = true);

// Copy-aware release: when the arena may hand each spilled tensor's bytes to
// another buffer (program::LayOut's `release_before`). A spilled tensor's
// Free follows its last forward reader in program order, but its copy out
// can end long after that, and a buffer given its bytes waits for the copy:
// the compute stream stalls. So its release is put off to the first compute
// instruction that starts, on `unplaced` (the Program's timeline before
// layout, which has no reuse waits), after the copy has ended. Where the
// bytes put off would take the bytes allocated at once past `cap_bytes` (the
// planner passes the budget), the tensors whose copies end first are
// released at that alloc instead. -1: the buffer is released at its Free;
// empty: every buffer is. `unplaced` needs its timings (Simulator::Timeline).
std::vector<int> ReleasesAfterCopies(const program::Program& program,
                                     const sim::SimulationResult& unplaced, int64_t cap_bytes);

// A Plan with its Program and the simulator's verdict on it.
struct Evaluation {
  program::Plan plan;
  program::Program program;
  // A candidate's has the step, every instruction's timing and the totals
  // (what a search reads); the plan RunPolicy returns is simulated in full
  // (the memory curve and what stalled the compute stream, too).
  sim::SimulationResult simulation;
  // The backward order of the schedule the Program was rewritten in.
  program::BackwardOrder backward_order = program::BackwardOrder::kTopological;

  int64_t arena_bytes() const { return program.arena_bytes; }
  double step_time_s() const { return simulation.step_time_s; }
};

// Whether the lower bound on the step (LowerBoundOnStep, the exact policy)
// covers a plan: it covers the plans that fetch each spilled tensor back at
// most once, not those that fetch one twice (PlannerOptions::fetch_twice).
inline bool BoundCovers(const program::Plan& plan) { return plan.CountRefetched() == 0; }

// A covered plan's step over the bound on it, less one. The simulator sums a
// plan's step in another order than none's, so a plan as fast as none (the
// bound, then) can come out an ulp faster: a gap that small is zero.
inline double GapToBound(double step_s, double bound_s) {
  const double gap = step_s / bound_s - 1.0;
  return std::abs(gap) < 1e-9 ? 0.0 : gap;
}

// What a policy returns.
struct PlanResult {
  std::string policy;
  bool feasible = false;
  // Feasible: the chosen plan. Infeasible: the smallest-arena plan the
  // policy evaluated.
  Evaluation best;
  // The smallest arena of any plan the policy evaluated: the budget it needs
  // at least (RunPolicy fills it in).
  int64_t smallest_arena_bytes = 0;
  double planning_s = 0;
  int evaluations = 0;  // candidate plans considered (rewritten, then bounded or simulated)
  int laid_out = 0;     // of those, the ones whose arena was laid out and step simulated
  int repeated = 0;     // of all, those that repeat a plan considered before in the run
  // hybrid: which starting plan the result was refined from ("evict", "swap",
  // "recompute", "hybrid-seed"), and whether the wall-clock safety net
  // stopped the refinement before it converged.
  std::string start;
  bool hit_time_limit = false;
  // The order of the backward pass the plan was made in (program/schedule.h):
  // the context's, unless the policy planned in others too
  // (PlannerOptions::every_backward_order). RunPolicy takes it from `best`.
  program::BackwardOrder backward_order = program::BackwardOrder::kTopological;
  // The backward orders the policy planned in: 1, or with
  // PlannerOptions::every_backward_order those whose schedules differ.
  int orders_planned = 1;
  // swap-lms and hybrid-seed-lms: the setting TFLMS's auto-tuning chose, in
  // its own words ("threshold 37, ahead 4, sync_mode 0").
  std::string tuning;
  // hybrid: how the refinement of each start that fitted fared in the race
  // (docs/planner.md), in the order the starts were ranked before it.
  struct Refinement {
    std::string start;
    double start_step_s = 0;  // the start's plan as per-tensor decisions express it
    double step_s = 0;        // where its refinement stopped
    int evaluations = 0;      // candidate plans it considered
    bool finished = false;    // it ran to its end
    // Neither finished nor left behind the leader: the wall-clock safety net
    // stopped it (or stopped the race before its turn).
    bool timed_out = false;
  };
  std::vector<Refinement> race;
  // optimal: what the integer program proved (docs/planner.md).
  struct Bound {
    // No plan that fits the budget has a faster step: the solver's proven
    // bound on its relaxation of the step.
    double step_s = 0;
    bool solved = false;  // the solver closed its search; false: its time limit stopped it
    double solve_s = 0;
    int columns = 0;
    int rows = 0;
    // The plan the relaxation's best solution describes, simulated; the
    // result is the faster of it and hybrid's plan ("relaxation" or "hybrid").
    bool relaxation_plan = false;  // the solver found a solution at all
    double relaxation_plan_step_s = 0;
    int64_t relaxation_plan_arena_bytes = 0;
    bool relaxation_plan_fits = false;
    std::string returned;
  };
  std::optional<Bound> bound;
};

// Everything a policy needs, and the one way to try a plan.
class PlanningContext {
 public:
  // The hardware profile is the machine the plan is for: the simulator takes
  // its copy engines from it (the cost model was made from it too).
  PlanningContext(const ir::Graph& graph, const analysis::CostModel& cost_model,
                  const analysis::HardwareProfile& hardware, PlannerOptions options);

  const ir::Graph& graph() const { return graph_; }
  const analysis::HardwareProfile& hardware() const { return hardware_; }
  const std::vector<ir::NodeId>& schedule() const { return rewrite_.schedule; }
  program::BackwardOrder backward_order() const { return backward_order_; }
  const analysis::CostModel& cost_model() const { return cost_model_; }
  const sim::Simulator& simulator() const { return simulator_; }
  const PlannerOptions& options() const { return options_; }
  int64_t budget_bytes() const { return options_.budget_bytes; }
  // The kernels' workspace every Program of this step reserves at the top of
  // its arena (program/workspaces.h: the largest any node declares on this
  // hardware), and the budget left for tensors below it, which is what the
  // policies' own estimates of memory work against.
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // What every rewrite of a candidate Plan starts from (program/rewriter.h).
  const program::RewriteSetup& rewrite_setup() const { return rewrite_; }
  int64_t tensor_budget_bytes() const { return options_.budget_bytes - workspace_bytes_; }

  // Whether a plan may spill this value: the graph allows it and the device
  // has a host link.
  bool CanSpill(ir::ValueId value) const {
    return options_.host_link && rewrite_.can_spill[static_cast<size_t>(value)];
  }

  // Saved activations, in the order of their producers in the schedule.
  const std::vector<autodiff::SavedTensor>& saved() const { return saved_; }
  int step_of(ir::NodeId node) const {
    return rewrite_.reads.step_of_node[static_cast<size_t>(node)];
  }
  // The first step that reads a value in the backward or update phase.
  int first_backward_read(ir::ValueId value) const {
    return rewrite_.reads.first_backward_read[static_cast<size_t>(value)];
  }
  // The last forward step that reads a value (its producer's step if none).
  int last_forward_read(ir::ValueId value) const {
    const ir::NodeId producer = graph_.value(value).producer;
    return std::max(producer == ir::kNoNode ? -1 : step_of(producer),
                    rewrite_.reads.last_forward_read[static_cast<size_t>(value)]);
  }
  // When each step starts if nothing stalls: the `none` timeline.
  double ideal_start_s(int step) const { return ideal_start_s_[static_cast<size_t>(step)]; }
  double ideal_step_time_s() const { return ideal_start_s_.back(); }

  // A plan with every tensor kept and the graph's pins applied.
  program::Plan KeepAll(std::string policy) const;

  // Applies the pins, builds the Program and simulates it. Counts evaluations
  // and remembers the one with the smallest arena since StartRun.
  //
  // With `layout_budget_bytes`, the arena is laid out as if that were the
  // budget: the copy-aware releases (ReleasesAfterCopies) are kept only where
  // the arena with them fits it. A search that evicts until the arena fits a
  // share of the budget can ask for this: laid out for the whole budget, a
  // plan keeps releases that hold spilled bytes until their copies end, and
  // its arena can stay over the share however much more is evicted.
  absl::StatusOr<Evaluation> Evaluate(program::Plan plan,
                                      std::optional<int64_t> layout_budget_bytes = std::nullopt);

  // The same, for a search that only accepts a plan that fits the budget and
  // whose step is faster than `must_beat_s`: nullopt when the plan cannot be
  // such a plan. Two bounds decide most candidates from the rewritten
  // instructions alone, before the arena is laid out: the bytes live at once
  // in program order (no layout needs fewer), and the step simulated without
  // the waits that reusing arena bytes adds (no layout makes it shorter). Both
  // are exact bounds, so a search takes the same path with or without them.
  absl::StatusOr<std::optional<Evaluation>> EvaluateIfBetter(program::Plan plan,
                                                             double must_beat_s);

  // For a search that needs to know only whether a plan fits: nullopt when it
  // does not (by the live-bytes bound when that suffices).
  absl::StatusOr<std::optional<Evaluation>> EvaluateIfFits(program::Plan plan);

  // A first-improvement search over `count` candidates, `make(i)` the i-th:
  // the first, in order, that EvaluateIfBetter would accept, with its index,
  // or nullopt. Candidates are evaluated `threads()` at a time, but counted
  // and remembered exactly as if they had been tried one by one until the
  // accepted one, so the result and every count are the same with any
  // number of threads. `make` is called on those threads, so it may only
  // read shared state.
  absl::StatusOr<std::optional<std::pair<size_t, Evaluation>>> FirstBetter(
      size_t count, const std::function<program::Plan(size_t)>& make, double must_beat_s);
  int threads() const;

  int evaluations() const { return evaluations_; }
  int laid_out() const { return laid_out_; }
  // Of those, how many repeat a plan considered before in this run: a bounded
  // search decides them from what it found then (see Examined below) where
  // it can, and examines them again where it cannot. The count is the
  // search's, the same with any number of threads.
  int repeated() const { return repeated_; }
  // RunPolicy calls it as a policy starts: forgets the smallest arena and
  // starts the clock of the wall-clock safety net.
  void StartRun() {
    smallest_.reset();
    {
      std::lock_guard lock(examined_mutex_);
      examined_before_.reset();
      examined_.clear();
    }
    smallest_arena_bytes_ = std::numeric_limits<int64_t>::max();
    run_start_ = std::chrono::steady_clock::now();
  }
  // Whether the policy has run longer than PlannerOptions::time_limit_s (the
  // safety net: a search that checks it stops early and says so).
  bool PastTimeLimit() const { return run_seconds() > options_.time_limit_s; }
  const std::optional<Evaluation>& smallest() const { return smallest_; }
  // Seconds since StartRun.
  double run_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  }
  // Takes over what a policy did in another context of the same step (in
  // another backward order): its candidates count here, and its smallest
  // arena competes with this context's.
  void Absorb(const PlanningContext& other);

  // A context of its own for one line of search that runs beside others
  // (hybrid's race runs its refinements side by side): the same step,
  // options and clock, what this one has found (a copy of the smallest
  // arena; the examined plans frozen and shared, see examined_before_), and
  // its own counts, which Absorb adds here when the line is done. What a
  // search decides does not depend on the counts or on which context
  // examined a plan first, so its plans are the same as in this one. Its
  // candidates count in this context's progress at once; `threads` is its
  // FirstBetter's.
  std::unique_ptr<PlanningContext> Lane(int threads) const;
  // The threads FirstBetter uses from its next call (0: the machine's cores,
  // at most 8). Another thread may set it while this context searches: what
  // FirstBetter finds does not depend on it.
  void set_threads(int threads) { threads_ = threads; }

  bool Fits(const Evaluation& evaluation) const {
    return evaluation.arena_bytes() <= options_.budget_bytes;
  }

 private:
  // Lane's: `parent`'s step and findings with these options, its own counts.
  PlanningContext(const PlanningContext& parent, PlannerOptions options);

  const ir::Graph& graph_;
  const analysis::CostModel& cost_model_;
  analysis::HardwareProfile hardware_;
  PlannerOptions options_;
  std::atomic<int> threads_;  // options_.threads, until set_threads
  int64_t workspace_bytes_ = 0;
  program::BackwardOrder backward_order_;
  // The schedule, when it reads each value, and what rewriting needs.
  program::RewriteSetup rewrite_;
  sim::Simulator simulator_;
  std::vector<autodiff::SavedTensor> saved_;
  absl::StatusOr<std::vector<program::Pin>> pins_;  // the graph's, read once
  std::vector<double> ideal_start_s_;               // one per step, and the end
  // What examining one candidate found, before any bookkeeping: nothing
  // (rejected by a bound, when `bounded`), or the laid-out, simulated
  // Evaluation. Examine changes nothing, so candidates can be examined on
  // several threads; Record then counts them in order.
  //
  // What a bounded examination found is kept for the rest of the run (from
  // StartRun), keyed by the plan's changes: a search can come back to a plan
  // it has tried (a move of one kind can make what a move of another made),
  // and such a plan is then decided from what was found, as examining it
  // again would decide it, unless it would now be accepted (its step beats
  // a bar it did not beat before), which examines it again.
  struct Examined {
    int64_t live_bytes_peak = 0;
    std::optional<double> unplaced_step_s;  // where the live bytes fit
    bool laid_out = false;                  // and then, where it beat the bar:
    int64_t arena_bytes = 0;
    double step_time_s = 0;
  };
  using PlanKey = std::vector<std::pair<ir::ValueId, program::TensorPlan>>;
  struct Outcome {
    absl::Status status;
    std::optional<Evaluation> evaluation;
    // A bounded examination's plan and findings, for Record to keep; or,
    // where the plan had been laid out before in this run and is rejected
    // again on what was found then, `laid_out_again` (counted as laid out
    // once more).
    std::optional<PlanKey> key;
    std::optional<Examined> found;
    bool laid_out_again = false;
  };
  // The arena is laid out to fit `fit_bytes` of tensors (by default
  // tensor_budget_bytes(); see Evaluate).
  Outcome Examine(program::Plan plan, double must_beat_s, bool bounded,
                  std::optional<int64_t> fit_bytes = std::nullopt) const;
  // The outcome a plan examined before in this run has on what was found
  // then, or nullopt if it must be examined.
  std::optional<Outcome> Recall(const PlanKey& key, double must_beat_s) const;
  absl::StatusOr<std::optional<Evaluation>> Record(Outcome outcome, double must_beat_s);
  absl::Status Count();  // one more candidate plan; Cancelled when interrupted
  void Remember(const Evaluation& evaluation);  // one more laid out; the smallest arena

  int evaluations_ = 0;
  // The candidates this context and its lanes have considered, for
  // PlannerOptions::progress: shared by them, so one count for the line.
  struct Progress {
    std::mutex mutex;
    int considered = 0;
  };
  std::shared_ptr<Progress> progress_ = std::make_shared<Progress>();
  int laid_out_ = 0;
  int repeated_ = 0;
  std::optional<Evaluation> smallest_;
  // Its arena, for Examine on FirstBetter's workers (INT64_MAX when none):
  // Record lowers it as they run, so a worker may read a larger value, which
  // only makes its layout give up later.
  std::atomic<int64_t> smallest_arena_bytes_ = std::numeric_limits<int64_t>::max();
  // What examining plans found in this run, in two parts, both under
  // examined_mutex_ (Record and the making of a lane write, FirstBetter's
  // workers read): a frozen part, shared with the lanes made from this
  // context, and what was found since. Making a lane folds the second part
  // into a new frozen one, so the lanes of a race share one copy of what
  // was found before it rather than holding one each.
  using ExaminedPlans = absl::flat_hash_map<PlanKey, Examined>;
  mutable std::mutex examined_mutex_;
  mutable std::shared_ptr<const ExaminedPlans> examined_before_;
  mutable ExaminedPlans examined_;
  // What was found for `key`, or null; the caller holds examined_mutex_.
  const Examined* FindExamined(const PlanKey& key) const;
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
  std::unique_ptr<WorkerPool> pool_;  // FirstBetter's threads, made on its first use
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Whether its plans spill: RunPolicy refuses it on a device without a host
  // link (PlannerOptions::host_link), and `compare` lists it as not run.
  virtual bool needs_host_link() const = 0;
  // Errors are for what cannot be planned at all (a pin that cannot be
  // honoured); a budget too small is a result with feasible = false.
  virtual absl::StatusOr<PlanResult> Run(PlanningContext& context) = 0;
};

// The policies by name, in the order `compare` lists them. Each entry makes
// its policy with the default options; a caller that wants others makes the
// policy class itself (policies.h), whose Options say what each constant is.
struct PolicyEntry {
  std::string name;
  std::string summary;  // one line
  std::function<std::unique_ptr<Policy>()> make;
  // An exact solver: the ruler the heuristics are measured by. `compare`,
  // `train` and the portfolio's tests run the heuristics only.
  bool exact = false;
  bool needs_host_link = true;  // Policy::needs_host_link
};
const std::vector<PolicyEntry>& PolicyRegistry();

// The registry's names, the heuristics' ("none", "swap", ... "hybrid") and,
// with `with_exact`, the exact solvers' after them ("optimal").
std::vector<std::string> PolicyNames(bool with_exact = false);
// The named policy with its default options; NotFound listing the names.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name);

// Runs a policy and fills in the planning time and evaluation count.
absl::StatusOr<PlanResult> RunPolicy(Policy& policy, PlanningContext& context);

// The options in their ranges (a non-negative budget, a positive time limit,
// non-negative counts, 0 to 1024 threads; NaN refused), each error naming the
// field and the range in words. RunPolicy checks them first.
absl::Status ValidatePlannerOptions(const PlannerOptions& options);

// "16GiB", "512MiB", "17179869184" or "60%" of the profile's device memory;
// empty: the profile's default budget (device memory less its reserve).
absl::StatusOr<int64_t> ParseBudget(std::string_view text,
                                    const analysis::HardwareProfile& profile);

// Picks, of two evaluations, the one a policy should prefer: one that fits
// over one that does not; between two that fit, the faster; between two that
// do not, the smaller arena.
bool Better(const Evaluation& a, const Evaluation& b, int64_t budget_bytes);

}  // namespace spillway::planner
