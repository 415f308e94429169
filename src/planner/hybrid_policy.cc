#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <span>

#include "planner/policies.h"
#include "program/rewriter.h"
#include "support/status_macros.h"
#include "support/worker_pool.h"

namespace spillway::planner {
namespace {

using program::Decision;

struct Candidate {
  ir::ValueId value = 0;
  int64_t bytes = 0;
  int produced = 0;        // step of the producer
  int first_backward = 0;  // first step that reads it back
  int last_read = 0;
  bool can_recompute = false;
  double d2h_s = 0;
  double h2d_s = 0;
  double window_s = 0;                     // ideal time between production and the first read back
  double recompute_s = 0;                  // producer and the lost intermediates it needs
  std::vector<ir::ValueId> rebuild_reads;  // saved tensors a rebuild reads

  // The part of its own two copies that its window cannot hide.
  double UnhiddenTransferSeconds() const { return std::max(0.0, d2h_s + h2d_s - window_s); }
};

// A starting plan of the portfolio and the policy it came from.
struct Start {
  std::string name;
  Evaluation evaluation;
};

// A plan as per-tensor decisions, and what the refinement keeps about it. The
// planner builds its eviction start in one, and refines each start of the
// portfolio in its own: the race (HybridPlanner::Race) advances several of
// them a slice at a time, so everything a refinement needs to resume is here.
struct Refinement {
  std::string start;                // the portfolio's plan it began from
  std::vector<Decision> decisions;  // per candidate
  std::vector<int> fetch_advance;   // per candidate: extra steps of lead for a fetch that stalled
  std::vector<int> recomputed_readers;  // per candidate: recomputed tensors that read it
  // Per candidate, reset every pass: the moves tried on it.
  std::vector<bool> tried_rebuild;
  std::vector<bool> tried_keep;
  std::vector<int> tried_exchange;  // the partners tried (ExchangeMoves' order)
  std::vector<bool> tried_spill;
  std::vector<int> tried_advance;  // the largest fetch advance tried
  // Copy seconds the spills take, each way (what SpillCost charges against).
  double d2h_load = 0;
  double h2d_load = 0;
  double lead_cap_s = -1;  // < 0: every fetch just in time
  double loaded_s = 0;     // the step of the start as these decisions express it
  // The start's second fetches (program::TensorPlan::refetch_after), which
  // per-tensor decisions do not express: every plan of the refinement keeps
  // them, a candidate's only while it stays spilled.
  struct SecondFetch {
    ir::ValueId value;
    int refetch_after;
    bool candidate;
  };
  std::vector<SecondFetch> second_fetches;
  std::optional<Evaluation> current;  // the plan as refined so far
  int evaluations = 0;                // candidate plans its refinement has considered
  int evaluations_to_best = 0;        // of those, how many until its last improvement
  int passes = 0;                     // passes completed
  bool in_pass = false;               // a pass is under way (its slice ended first)
  double pass_start_s = 0;            // the step time when that pass began
  bool lead_cap_searched = false;
  bool done = false;       // converged, or stopped by a limit
  bool left_race = false;  // dropped behind the leader before its end
};

class HybridPlanner {
 public:
  HybridPlanner(PlanningContext& context, const HybridPolicy::Options& options,
                std::span<const HybridPolicy::Seed> seeds)
      : context_(context), options_(options), seeds_(seeds) {}
  // A planner for one refinement of `parent`'s race, in its own context:
  // the same candidates, nothing active.
  HybridPlanner(const HybridPlanner& parent, PlanningContext& context)
      : context_(context),
        options_(parent.options_),
        seeds_(parent.seeds_),
        candidates_(parent.candidates_),
        index_of_value_(parent.index_of_value_),
        forward_s_(parent.forward_s_),
        backward_s_(parent.backward_s_) {}

  // The portfolio: the plans of the heuristic policies (each as its own
  // policy makes it, with its default options) and hybrid's own eviction
  // plans, for the budget and for a share of it. Each of them that fits is
  // refined from the nearest per-tensor decisions, in a race that gives the
  // most candidates to the refinements that do best, and then the best plan
  // is kicked (Kick). The result is the best plan seen, so it is never
  // worse than any of the heuristics.
  absl::StatusOr<PlanResult> Run() {
    Collect();
    PlanResult result;
    active_ = Fresh("evict");
    ASSIGN_OR_RETURN(Evaluation keep_all, Evaluate(active_.decisions));
    if (context_.Fits(keep_all)) {  // the ideal step: nothing to improve
      result.best = std::move(keep_all);
      result.start = "keep";
      return result;
    }
    // `recompute`'s starts are made in a lane of their own, beside the
    // others where there are two threads or more, and after them where there
    // is one: the same plans and counts. On deep graphs the two lines cost
    // the most, and `hybrid-seed`'s unit trials the most of all.
    std::unique_ptr<PlanningContext> lane = context_.Lane(1);
    absl::StatusOr<RecomputeStarts> recompute_starts;
    auto make_recompute_starts = [&] { recompute_starts = MakeRecomputeStarts(*lane); };
    std::vector<Start> starts;
    auto make_other_starts = [&]() -> absl::Status {
      std::optional<Evaluation> tight_keep_all;
      if (options_.tight_eviction_share > 0) tight_keep_all = keep_all;
      ASSIGN_OR_RETURN(Evaluation evicted, EvictUntilFits(active_.decisions, std::move(keep_all)));
      starts.push_back({"evict", std::move(evicted)});
      if (tight_keep_all) {
        // The eviction plan for a share of the budget: room to spare, which
        // the refinement fills by keeping back what the budget allows.
        active_ = Fresh("evict-tight");
        ASSIGN_OR_RETURN(
            Evaluation tight,
            EvictUntilFits(active_.decisions, *std::move(tight_keep_all), TightTarget()));
        if (context_.Fits(tight)) starts.push_back({"evict-tight", std::move(tight)});
      }
      SwapPolicy swap;
      ASSIGN_OR_RETURN(PlanResult swapped, swap.Run(context_));
      starts.push_back({"swap", swapped.best});
      ASSIGN_OR_RETURN(PlanResult seeded,
                       HybridSeedPolicy::RecomputeUnits(context_, std::move(swapped)));
      hit_time_limit_ = hit_time_limit_ || seeded.hit_time_limit;
      starts.push_back({"hybrid-seed", std::move(seeded.best)});
      SwapLmsPolicy swap_lms;
      ASSIGN_OR_RETURN(PlanResult lms, swap_lms.Run(context_));
      starts.push_back({"swap-lms", std::move(lms.best)});
      return absl::OkStatus();
    };
    absl::Status others;
    if (const int width = context_.threads(); width > 1) {
      // Two lines of search on the machine's threads: `recompute`'s on one,
      // the others' on the rest, which then evaluate their lists of
      // candidates (the unit trials) side by side on every thread once
      // `recompute`'s starts are made.
      context_.set_threads(width - 1);
      Pool(1).Run(
          [&] {
            make_recompute_starts();
            context_.set_threads(width);
          },
          [&] { others = make_other_starts(); });
      context_.set_threads(context_.options().threads);
    } else {
      others = make_other_starts();
      if (others.ok()) make_recompute_starts();
    }
    context_.Absorb(*lane);
    RETURN_IF_ERROR(others);
    RETURN_IF_ERROR(recompute_starts.status());
    hit_time_limit_ = hit_time_limit_ || recompute_starts->hit_time_limit;
    for (Start& start : recompute_starts->starts) starts.push_back(std::move(start));

    // Best first (stable: on a tie the earlier, evict first). Every start
    // that fits enters the race: which start refines best differs between
    // workloads (a tight budget on a slow link favours recomputation's plan,
    // a roomy one eviction's), and is not always the one that starts best.
    std::stable_sort(starts.begin(), starts.end(), [&](const Start& a, const Start& b) {
      return Better(a.evaluation, b.evaluation, context_.budget_bytes());
    });
    result.best = starts.front().evaluation;
    result.start = starts.front().name;
    std::vector<Refinement> refinements;
    for (const Start& start : starts) {
      if (!context_.Fits(start.evaluation)) break;
      ASSIGN_OR_RETURN(const bool fits, Load(start));
      // A start that per-tensor decisions do not express within the budget
      // still competes as it was.
      if (fits) refinements.push_back(std::move(active_));
    }
    RETURN_IF_ERROR(Race(refinements));
    auto record = [&result](const Refinement& refinement) {
      result.race.push_back({.start = refinement.start,
                             .start_step_s = refinement.loaded_s,
                             .step_s = refinement.current->step_time_s(),
                             .evaluations = refinement.evaluations,
                             .finished = refinement.done,
                             .timed_out = !refinement.done && !refinement.left_race});
    };
    for (const Refinement& refinement : refinements) record(refinement);
    // A refinement after the race (a kick's, a seed's): recorded, and its
    // plan taken where it is better; whether it was.
    auto take_if_better = [&](Refinement& refinement) {
      record(refinement);
      if (!Better(*refinement.current, result.best, context_.budget_bytes())) return false;
      result.best = *std::move(refinement.current);
      result.start = std::move(refinement.start);
      return true;
    };
    int best_needed = 0;  // candidates the refinement that holds the best plan took to reach it
    for (Refinement& refinement : refinements) {
      if (Better(*refinement.current, result.best, context_.budget_bytes())) {
        result.best = *std::move(refinement.current);
        result.start = refinement.start;
        best_needed = refinement.evaluations_to_best;
      }
    }
    // The refinement is a local search, and its best plan a local optimum
    // that no single move improves. Tightened (evicted until it fits a share
    // of the budget, as the evict-tight start is made), it is a nearby plan
    // with room to spare, from which the refinement can reach another.
    bool kick_gained = false;
    for (int kick = 0; kick < options_.kicks && !hit_time_limit_ && !CapReached(); ++kick) {
      ASSIGN_OR_RETURN(std::optional<Refinement> kicked, Kick(result, /*gently=*/false));
      if (!kicked || !take_if_better(*kicked)) break;
      kick_gained = true;
    }
    // Where no kick gained, a gentler one: a tightening that evicts only what
    // the share needs lands nearer the best plan, and its refinement stays in
    // the race until it has considered as many candidates as the best plan's
    // own refinement took to reach it (HybridOptions::gentle_kick).
    if (options_.gentle_kick && options_.kicks > 0 && !kick_gained && !hit_time_limit_ &&
        !CapReached()) {
      ASSIGN_OR_RETURN(std::optional<Refinement> kicked,
                       Kick(result, /*gently=*/true, best_needed));
      if (kicked) take_if_better(*kicked);
    }
    // Plans made elsewhere, last: what came before is the plan without them,
    // which they can only improve on.
    for (const HybridPolicy::Seed& seed : seeds_) {
      if (hit_time_limit_ || CapReached()) break;
      ASSIGN_OR_RETURN(std::optional<Refinement> seeded, RefineSeed(seed, result));
      if (seeded) take_if_better(*seeded);
    }
    result.hit_time_limit = hit_time_limit_;
    return result;
  }

  // The recompute policy's plan in its two steps, each a start of its own:
  // its families' plan, and that plan kept back tensor by tensor (what
  // `recompute` ends with). Refined, the families' plan does better on some
  // workloads (its recomputations leave room that spills fill) and the
  // kept-back plan on others (it has already kept the cheap tensors).
  // Planned in `context` (a lane of this planner's context).
  struct RecomputeStarts {
    std::vector<Start> starts;
    bool hit_time_limit = false;
  };
  static absl::StatusOr<RecomputeStarts> MakeRecomputeStarts(PlanningContext& context) {
    RecomputeStarts made;
    RecomputePolicy::Options families;
    families.keep_back_passes = 0;
    ASSIGN_OR_RETURN(PlanResult recomputed, RecomputePolicy(families).Run(context));
    made.hit_time_limit = recomputed.hit_time_limit;
    if (context.Fits(recomputed.best)) {
      Evaluation kept_back = recomputed.best;
      ASSIGN_OR_RETURN(const bool stopped,
                       RecomputePolicy().ImproveByKeepingBack(context, kept_back));
      made.hit_time_limit = made.hit_time_limit || stopped;
      // It is the families' plan itself where keeping back gains nothing.
      if (Better(kept_back, recomputed.best, context.budget_bytes())) {
        made.starts.push_back({"recompute, kept back", std::move(kept_back)});
      }
    }
    made.starts.push_back({"recompute", std::move(recomputed.best)});
    return made;
  }

  // A pool of `threads` threads besides the calling one, kept for the run.
  WorkerPool& Pool(int threads) {
    if (pool_ == nullptr || pool_->size() != threads) pool_ = std::make_unique<WorkerPool>(threads);
    return *pool_;
  }

  // The arena the evict-tight start and a kick evict to.
  int64_t TightTarget() const {
    return static_cast<int64_t>(options_.tight_eviction_share *
                                static_cast<double>(context_.budget_bytes()));
  }

  // A kick: `result`'s best plan, tightened to TightTarget by eviction and
  // refined, racing the best plan (RaceTheBest, staying at least `stay_for`
  // candidates); nullopt where that does not fit. A gentle kick lays out
  // each round of its eviction for the share, not for the budget.
  absl::StatusOr<std::optional<Refinement>> Kick(const PlanResult& result, bool gently,
                                                 int stay_for = 0) {
    if (options_.tight_eviction_share <= 0) return std::nullopt;
    ASSIGN_OR_RETURN(
        const bool fits,
        Load({result.start + (gently ? ", tightened gently" : ", tightened"), result.best}));
    if (!fits) return std::nullopt;
    ASSIGN_OR_RETURN(Evaluation tightened,
                     EvictUntilFits(active_.decisions, *std::move(active_.current), TightTarget(),
                                    /*lay_out_for_target=*/gently));
    if (!context_.Fits(tightened)) return std::nullopt;
    active_.loaded_s = tightened.step_time_s();
    active_.current = std::move(tightened);
    RETURN_IF_ERROR(RaceTheBest(result, stay_for));
    return std::move(active_);
  }

  // A seed (HybridPolicy::Seed) in this order's schedule, evaluated for this
  // budget and refined, racing the best plan as a kick does; nullopt where it
  // is another order's or does not fit. The refinement ends no worse than
  // the seed as evaluated here, which it keeps where per-tensor decisions
  // express it less well.
  absl::StatusOr<std::optional<Refinement>> RefineSeed(const HybridPolicy::Seed& seed,
                                                       const PlanResult& result) {
    if (seed.evaluation.program.schedule != context_.schedule()) return std::nullopt;
    ASSIGN_OR_RETURN(Evaluation evaluated, context_.Evaluate(seed.evaluation.plan));
    if (!context_.Fits(evaluated)) return std::nullopt;
    ASSIGN_OR_RETURN(const bool fits, Load({seed.name, evaluated}));
    if (fits) {
      RETURN_IF_ERROR(RaceTheBest(result));
    } else {
      active_.loaded_s = evaluated.step_time_s();
      active_.done = true;
    }
    if (!active_.current || Better(evaluated, *active_.current, context_.budget_bytes())) {
      active_.current = std::move(evaluated);
    }
    return std::move(active_);
  }

  // Refines the active refinement, racing `result`'s best plan as the
  // portfolio's refinements race each other (Race): in slices of candidates
  // doubling from the race's first quota; it stops once it is behind the
  // best plan and gaining again what it gained in its last slice would not
  // take it past (but not before it has considered `stay_for` candidates),
  // and runs until it converges while ahead.
  absl::Status RaceTheBest(const PlanResult& result, int stay_for = 0) {
    const double best_s = result.best.step_time_s();
    int quota = options_.race_first_quota;
    while (!active_.done && !hit_time_limit_) {
      const double before_s = active_.current->step_time_s();
      RETURN_IF_ERROR(Advance(quota));
      if (quota == 0 || active_.done) break;
      const double now_s = active_.current->step_time_s();
      const bool ahead = Better(*active_.current, result.best, context_.budget_bytes());
      if (active_.evaluations >= stay_for && !StaysInRace(now_s, before_s - now_s, best_s, ahead)) {
        active_.left_race = true;
        break;
      }
      quota = NextQuota(quota);
    }
    return absl::OkStatus();
  }

  // Makes the active refinement a start's plan, as far as per-tensor
  // decisions (and fetch steps) express it, and evaluates it; false if that
  // does not fit.
  absl::StatusOr<bool> Load(const Start& start) {
    active_ = Fresh(start.name);
    std::vector<Decision>& decisions = active_.decisions;
    const program::Plan& plan = start.evaluation.plan;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      Apply(i, plan.at(candidates_[i].value).decision, decisions);
    }
    std::vector<bool> candidate(plan.size(), false);
    for (const Candidate& c : candidates_) candidate[static_cast<size_t>(c.value)] = true;
    for (const ir::Value& value : context_.graph().values()) {
      const program::TensorPlan& tensor = plan.at(value.id);
      if (tensor.decision != Decision::kSpill || tensor.refetch_after < 0) continue;
      active_.second_fetches.push_back(
          {value.id, tensor.refetch_after, candidate[static_cast<size_t>(value.id)]});
    }
    // Just in time, then this many steps earlier: the plan's own fetch step.
    const std::vector<int> needed = NeededSteps(decisions);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const program::TensorPlan& tensor = plan.at(candidates_[i].value);
      const int fetch = tensor.fetch_step < 0 ? needed[i] : tensor.fetch_step;
      active_.fetch_advance[i] =
          decisions[i] == Decision::kSpill ? std::max(0, needed[i] - fetch) : 0;
    }
    ASSIGN_OR_RETURN(Evaluation loaded, Evaluate(decisions));
    if (!context_.Fits(loaded)) return false;
    active_.loaded_s = loaded.step_time_s();
    active_.current = std::move(loaded);
    return true;
  }

  // The race between the refinements of the portfolio's starts. Each round
  // advances every refinement still in it by the round's quota of candidate
  // plans, and the quota doubles from round to round. After a round a
  // refinement stays in the race only if it is the best plan so far or, were
  // it to gain again what it gained in that round (times
  // `race_gain_credit`), it would overtake the best plan so far; one that
  // has converged leaves the race but its plan still counts. A start that
  // improves slowly but steadily thus keeps its place, and one stuck behind
  // the leader stops taking candidates. The last one left runs until it
  // converges. Quotas count candidates, not seconds, so the race ends the
  // same way on every machine. With no first quota every refinement runs
  // until it converges at once; with an infinite credit none leaves the race
  // early, so they only take turns.
  //
  // The refinements of a round run side by side, on up to the context's
  // threads, each in a lane of its own (PlanningContext::Lane: its own
  // planner, counts and examined plans), so a refinement's course depends on
  // nothing the others do: the plans and counts are those of running them
  // one after the other, on any number of threads. The lanes' counts join
  // the context's when the race ends.
  absl::Status Race(std::vector<Refinement>& refinements) {
    const size_t n = refinements.size();
    struct Lane {
      std::unique_ptr<PlanningContext> context;
      std::unique_ptr<HybridPlanner> planner;
    };
    std::vector<Lane> lanes(n);
    for (size_t i = 0; i < n; ++i) {
      lanes[i].context = context_.Lane(1);
      lanes[i].planner = std::make_unique<HybridPlanner>(*this, *lanes[i].context);
    }
    const auto width = static_cast<size_t>(context_.threads());

    std::vector<size_t> racing(n);
    for (size_t i = 0; i < racing.size(); ++i) racing[i] = i;
    std::vector<double> gain(n, 0);  // in the last round, seconds of step
    std::vector<absl::Status> status(n);
    int quota = options_.race_first_quota;
    while (!racing.empty() && !hit_time_limit_) {
      const bool last = racing.size() == 1;
      auto advance = [&](size_t i) {
        HybridPlanner& planner = *lanes[i].planner;
        const double before = refinements[i].current->step_time_s();
        std::swap(planner.active_, refinements[i]);
        status[i] = planner.Advance(last ? 0 : quota);
        std::swap(planner.active_, refinements[i]);
        gain[i] = before - refinements[i].current->step_time_s();
      };
      const size_t side_by_side = std::min(width, racing.size());
      if (side_by_side <= 1) {
        // Alone, a refinement evaluates its lists of moves on every thread.
        for (const size_t i : racing) {
          lanes[i].context->set_threads(last ? static_cast<int>(width) : 1);
          advance(i);
          if (!status[i].ok()) break;
        }
      } else {
        for (const size_t i : racing) lanes[i].context->set_threads(1);
        std::atomic<size_t> next = 0;
        std::atomic<bool> failed = false;  // no more refinements start after an error
        auto work = [&] {
          for (size_t k = next++; k < racing.size() && !failed; k = next++) {
            advance(racing[k]);
            if (!status[racing[k]].ok()) failed = true;
          }
        };
        Pool(static_cast<int>(side_by_side) - 1).Run(work, work);
      }
      for (const size_t i : racing) {
        RETURN_IF_ERROR(status[i]);
        hit_time_limit_ = hit_time_limit_ || lanes[i].planner->hit_time_limit_;
      }
      size_t best = 0;
      for (size_t i = 1; i < refinements.size(); ++i) {
        if (Better(*refinements[i].current, *refinements[best].current, context_.budget_bytes()))
          best = i;
      }
      const double best_s = refinements[best].current->step_time_s();
      std::erase_if(racing, [&](size_t i) {
        if (refinements[i].done) return true;
        refinements[i].left_race =
            !StaysInRace(refinements[i].current->step_time_s(), gain[i], best_s, i == best);
        return refinements[i].left_race;
      });
      quota = NextQuota(quota);
    }
    for (const Lane& lane : lanes) context_.Absorb(*lane.context);
    return absl::OkStatus();
  }

  // The race's rule: after a slice that gained `gain_s`, a refinement whose
  // plan steps `step_s` stays in the race if it holds the best plan, or if
  // gaining that again (times `race_gain_credit`) would take it below the
  // best plan's `best_s`.
  bool StaysInRace(double step_s, double gain_s, double best_s, bool holds_best) const {
    if (holds_best || std::isinf(options_.race_gain_credit)) return true;
    return step_s - options_.race_gain_credit * gain_s < best_s;
  }

  // The quota of the race's next round: twice this one's.
  static int NextQuota(int quota) {
    return quota > std::numeric_limits<int>::max() / 2 ? quota : 2 * quota;
  }

 private:
  // Decisions that keep everything, with the per-candidate state sized.
  Refinement Fresh(std::string start) const {
    Refinement refinement;
    refinement.start = std::move(start);
    const size_t n = candidates_.size();
    refinement.decisions.assign(n, Decision::kKeep);
    refinement.fetch_advance.assign(n, 0);
    refinement.recomputed_readers.assign(n, 0);
    refinement.tried_rebuild.assign(n, false);
    refinement.tried_keep.assign(n, false);
    refinement.tried_exchange.assign(n, 0);
    refinement.tried_spill.assign(n, false);
    refinement.tried_advance.assign(n, 0);
    return refinement;
  }

  // Candidate plans the active refinement may still consider: what is left
  // of its slice of the race and of the evaluation cap (part of the
  // algorithm, the same on every machine).
  int Left() const {
    int left = slice_end_ - context_.evaluations();
    const int limit = context_.options().max_evaluations;
    if (limit > 0) left = std::min(left, limit - Considered());
    return std::max(0, left);
  }
  bool CapReached() const {
    const int limit = context_.options().max_evaluations;
    return limit > 0 && Considered() >= limit;
  }
  // Candidate plans the active refinement has considered, this slice included.
  int Considered() const { return active_.evaluations + (context_.evaluations() - slice_start_); }
  // The refinement's stopping rule besides convergence: its slice or its cap
  // is spent, or the wall-clock safety net (which is not the same on every
  // machine, and is recorded when it fires) has been reached.
  bool OutOfTime() {
    if (context_.PastTimeLimit()) hit_time_limit_ = true;
    return hit_time_limit_ || Left() == 0;
  }

  void Collect() {
    const ir::Graph& graph = context_.graph();
    std::vector<bool> saved(static_cast<size_t>(graph.num_values()), false);
    for (const autodiff::SavedTensor& tensor : context_.saved())
      saved[static_cast<size_t>(tensor.value)] = true;
    std::vector<double> rebuild(static_cast<size_t>(graph.num_values()), -1.0);
    // Time to rebuild a value: its producer, plus the intermediates it reads
    // that nothing keeps (saved tensors are assumed resident or fetched).
    auto rebuild_seconds = [&](auto&& self, ir::ValueId value) -> double {
      double& memo = rebuild[static_cast<size_t>(value)];
      if (memo >= 0) return memo;
      const ir::Node& node = graph.node(graph.value(value).producer);
      double seconds = context_.simulator().node_seconds(node.id);
      for (ir::ValueId input : node.inputs) {
        const ir::Value& in = graph.value(input);
        if (in.producer == ir::kNoNode || saved[static_cast<size_t>(input)]) continue;
        if (!program::CanRecompute(graph, input)) continue;
        seconds += self(self, input);
      }
      return memo = seconds;
    };
    // The saved tensors a rebuild reads: through the intermediates it rebuilds
    // too, and a batch norm's saved statistics.
    auto rebuild_reads = [&](auto&& self, ir::ValueId value,
                             std::vector<ir::ValueId>& reads) -> void {
      const ir::Node& node = graph.node(graph.value(value).producer);
      std::vector<ir::ValueId> inputs = node.inputs;
      if (node.op == ir::OpKind::kBatchNorm && node.outputs.size() > 2) {
        inputs.push_back(node.outputs[1]);
        inputs.push_back(node.outputs[2]);
      }
      for (ir::ValueId input : inputs) {
        const ir::Value& in = graph.value(input);
        if (in.producer == ir::kNoNode) continue;
        if (saved[static_cast<size_t>(input)]) {
          reads.push_back(input);
        } else if (program::CanRecompute(graph, input)) {
          self(self, input, reads);
        }
      }
    };
    for (const autodiff::SavedTensor& tensor : context_.saved()) {
      if (!context_.CanSpill(tensor.value)) continue;
      const int read = context_.first_backward_read(tensor.value);
      if (read == program::ScheduleReads::kNever) continue;
      Candidate candidate;
      candidate.value = tensor.value;
      candidate.bytes = tensor.bytes;
      candidate.produced = context_.step_of(tensor.producer);
      candidate.first_backward = read;
      candidate.last_read = read;
      for (ir::NodeId reader : tensor.backward_readers) {
        candidate.last_read = std::max(candidate.last_read, context_.step_of(reader));
      }
      candidate.can_recompute = program::CanRecompute(graph, tensor.value);
      candidate.d2h_s =
          context_.simulator().copy_seconds(tensor.bytes, analysis::CopyDirection::kDeviceToHost);
      candidate.h2d_s =
          context_.simulator().copy_seconds(tensor.bytes, analysis::CopyDirection::kHostToDevice);
      candidate.window_s =
          context_.ideal_start_s(read) - context_.ideal_start_s(candidate.produced + 1);
      candidate.recompute_s = candidate.can_recompute
                                  ? rebuild_seconds(rebuild_seconds, tensor.value)
                                  : std::numeric_limits<double>::infinity();
      if (candidate.can_recompute)
        rebuild_reads(rebuild_reads, tensor.value, candidate.rebuild_reads);
      candidates_.push_back(candidate);
    }
    index_of_value_.assign(static_cast<size_t>(graph.num_values()), -1);
    for (size_t i = 0; i < candidates_.size(); ++i) {
      index_of_value_[static_cast<size_t>(candidates_[i].value)] = static_cast<int>(i);
    }
    forward_s_ = context_.ideal_start_s(FirstBackwardStep());
    backward_s_ = context_.ideal_step_time_s() - forward_s_;
  }

  int FirstBackwardStep() const {
    const ir::Graph& graph = context_.graph();
    for (size_t step = 0; step < context_.schedule().size(); ++step) {
      if (graph.node(context_.schedule()[step]).phase != ir::Phase::kForward)
        return static_cast<int>(step);
    }
    return static_cast<int>(context_.schedule().size());
  }

  // What spilling a candidate would cost in step time, given the copy time the
  // spills chosen so far already take on each link: the part of its own
  // transfer that its window cannot hide, plus whatever overflows the
  // forward pass (for d2h) or the backward pass (for h2d).
  double SpillCost(const Candidate& c) const {
    const double own = c.UnhiddenTransferSeconds();
    const double d2h_over = std::clamp(active_.d2h_load + c.d2h_s - forward_s_, 0.0, c.d2h_s);
    const double h2d_over = std::clamp(active_.h2d_load + c.h2d_s - backward_s_, 0.0, c.h2d_s);
    return std::max(own, d2h_over + h2d_over);
  }

  // A tensor is rebuilt only from tensors that are kept or fetched, never
  // from other rebuilt ones: chains of recomputation would hold a whole
  // segment at once and save nothing (the recompute policy's trade-off).
  bool RecomputeAllowed(size_t index, const std::vector<Decision>& decisions) const {
    const Candidate& c = candidates_[index];
    if (!c.can_recompute || active_.recomputed_readers[index] > 0) return false;
    for (ir::ValueId read : c.rebuild_reads) {
      const int j = index_of_value_[static_cast<size_t>(read)];
      if (j >= 0 && decisions[static_cast<size_t>(j)] == Decision::kRecompute) return false;
    }
    return true;
  }

  Decision Cheaper(size_t index, const std::vector<Decision>& decisions, double* cost) const {
    const Candidate& c = candidates_[index];
    const double spill = SpillCost(c);
    if (RecomputeAllowed(index, decisions) && c.recompute_s < spill) {
      *cost = c.recompute_s;
      return Decision::kRecompute;
    }
    *cost = spill;
    return Decision::kSpill;
  }

  void Apply(size_t index, Decision decision, std::vector<Decision>& decisions) {
    const Decision before = decisions[index];
    if (before == Decision::kSpill) {
      active_.d2h_load -= candidates_[index].d2h_s;
      active_.h2d_load -= candidates_[index].h2d_s;
    }
    if (decision == Decision::kSpill) {
      active_.d2h_load += candidates_[index].d2h_s;
      active_.h2d_load += candidates_[index].h2d_s;
    }
    if ((before == Decision::kRecompute) != (decision == Decision::kRecompute)) {
      const int delta = decision == Decision::kRecompute ? 1 : -1;
      for (ir::ValueId read : candidates_[index].rebuild_reads) {
        const int j = index_of_value_[static_cast<size_t>(read)];
        if (j >= 0) active_.recomputed_readers[static_cast<size_t>(j)] += delta;
      }
    }
    decisions[index] = decision;
  }

  // The step by which each candidate must be back on the device: its first
  // backward reader, or earlier the rebuild of a recomputed tensor that reads it.
  std::vector<int> NeededSteps(const std::vector<Decision>& decisions) const {
    std::vector<int> needed(candidates_.size());
    for (size_t i = 0; i < candidates_.size(); ++i) needed[i] = candidates_[i].first_backward;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] != Decision::kRecompute) continue;
      for (ir::ValueId read : candidates_[i].rebuild_reads) {
        const int j = index_of_value_[static_cast<size_t>(read)];
        if (j < 0) continue;
        int& need = needed[static_cast<size_t>(j)];
        need = std::min(need, candidates_[i].first_backward);
      }
    }
    return needed;
  }

  // The plan for a set of decisions, with every fetch issued as late as the
  // h2d queue allows on the ideal timeline: walking back from the last
  // deadline, each copy ends by its reader's start and before the next copy
  // in the queue begins. A copy starts at most the lead cap earlier than its
  // own deadline needs: a saturated queue would otherwise pull fetches far
  // ahead and hold their bytes (the cap is searched once the plan fits).
  program::Plan MakePlan(const std::vector<Decision>& decisions,
                         const std::vector<int>& fetch_advance) const {
    program::Plan plan = context_.KeepAll("hybrid");
    const std::vector<int> needed = NeededSteps(decisions);
    std::vector<size_t> spilled;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kRecompute) plan.Recompute(candidates_[i].value);
      if (decisions[i] == Decision::kSpill) spilled.push_back(i);
    }
    std::sort(spilled.begin(), spilled.end(),
              [&](size_t a, size_t b) { return needed[a] > needed[b]; });
    double next_start = std::numeric_limits<double>::infinity();
    for (size_t i : spilled) {
      const Candidate& c = candidates_[i];
      const double deadline = context_.ideal_start_s(needed[i]);
      const double finish = std::min(deadline, next_start);
      const double start = std::max(finish - c.h2d_s, deadline - c.h2d_s - active_.lead_cap_s);
      next_start = start;
      int step = needed[i];
      // A negative cap: just in time, before the step that needs it.
      while (active_.lead_cap_s >= 0 && step > c.produced + 1 &&
             context_.ideal_start_s(step) > start) {
        --step;
      }
      step = std::max(c.produced + 1, step - fetch_advance[i]);
      plan.Spill(c.value, step);
    }
    for (const Refinement::SecondFetch& second : active_.second_fetches) {
      const program::TensorPlan& tensor = plan.at(second.value);
      if (second.candidate && tensor.decision != Decision::kSpill) continue;
      plan.Spill(second.value, tensor.decision == Decision::kSpill ? tensor.fetch_step : -1,
                 second.refetch_after);
    }
    return plan;
  }

  // `layout_budget_bytes`: as PlanningContext::Evaluate's.
  absl::StatusOr<Evaluation> Evaluate(const std::vector<Decision>& decisions,
                                      std::optional<int64_t> layout_budget_bytes = std::nullopt) {
    return context_.Evaluate(MakePlan(decisions, active_.fetch_advance), layout_budget_bytes);
  }

  // Evicts, round after round, the tensors resident at the memory peak with
  // the most bytes per second of cost, until the arena is at most `target`
  // (by default the budget) or nothing is left. Each round's arena is laid
  // out for the budget, or with `lay_out_for_target` for the target, and
  // then, where a round ran, the result is laid out for the budget again.
  absl::StatusOr<Evaluation> EvictUntilFits(std::vector<Decision>& decisions, Evaluation current,
                                            std::optional<int64_t> target = std::nullopt,
                                            bool lay_out_for_target = false) {
    if (!target) target = context_.budget_bytes();
    const std::optional<int64_t> layout_budget =
        lay_out_for_target ? target : std::optional<int64_t>();
    bool evicted = false;  // a round ran
    while (current.arena_bytes() > *target) {
      const int peak = program::LiveBytesPeakStep(current.program);
      const int64_t excess = current.arena_bytes() - *target;
      std::vector<size_t> order;
      for (size_t i = 0; i < candidates_.size(); ++i) {
        if (decisions[i] != Decision::kKeep) continue;
        const Candidate& c = candidates_[i];
        if (c.produced <= peak && peak <= c.last_read) order.push_back(i);
      }
      if (order.empty()) {
        for (size_t i = 0; i < candidates_.size(); ++i) {
          if (decisions[i] == Decision::kKeep) order.push_back(i);
        }
      }
      if (order.empty()) {
        // Everything is off the device and it still does not fit: rebuilds
        // hold their inputs and temporaries, so trade the largest for spills.
        ASSIGN_OR_RETURN(current, SpillRecomputed(decisions, std::move(current)));
        break;
      }
      std::vector<double> score(candidates_.size(), 0);
      for (size_t i : order) {
        double cost = 0;
        Cheaper(i, decisions, &cost);
        score[i] = static_cast<double>(candidates_[i].bytes) / (cost + 1e-7);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return score[a] > score[b]; });
      int64_t freed = 0;
      for (size_t i : order) {
        if (freed >= excess) break;
        double cost = 0;
        Apply(i, Cheaper(i, decisions, &cost), decisions);
        freed += candidates_[i].bytes;
      }
      ASSIGN_OR_RETURN(current, Evaluate(decisions, layout_budget));
      evicted = true;
    }
    if (evicted && layout_budget && *layout_budget != context_.budget_bytes()) {
      ASSIGN_OR_RETURN(current, Evaluate(decisions));
    }
    return current;
  }

  absl::StatusOr<Evaluation> SpillRecomputed(std::vector<Decision>& decisions, Evaluation current) {
    std::vector<size_t> recomputed;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kRecompute) recomputed.push_back(i);
    }
    std::stable_sort(recomputed.begin(), recomputed.end(), [&](size_t a, size_t b) {
      return candidates_[a].bytes > candidates_[b].bytes;
    });
    size_t next = 0;
    while (!context_.Fits(current) && next < recomputed.size()) {
      // Halve what is left each round: few evaluations, and no more spills
      // than needed once it fits.
      const size_t batch = std::max<size_t>(1, (recomputed.size() - next + 1) / 2);
      for (size_t k = 0; k < batch && next < recomputed.size(); ++k) {
        Apply(recomputed[next++], Decision::kSpill, decisions);
      }
      ASSIGN_OR_RETURN(current, Evaluate(decisions));
    }
    return current;
  }

  // The compute stream's stalls, largest first, each with the candidate whose
  // fetch it waited for.
  std::vector<std::pair<double, size_t>> FetchStalls(const Evaluation& evaluation) const {
    const program::Program& program = evaluation.program;
    std::vector<int> fetch_of_event(static_cast<size_t>(program.num_events), -1);
    for (const program::Instruction& instruction : program.instructions) {
      if (instruction.kind == program::InstructionKind::kCopyToDevice && instruction.record >= 0) {
        fetch_of_event[static_cast<size_t>(instruction.record)] =
            program.buffer(instruction.writes[0]).value;
      }
    }
    std::vector<int> candidate_of_value(static_cast<size_t>(context_.graph().num_values()), -1);
    for (size_t i = 0; i < candidates_.size(); ++i)
      candidate_of_value[static_cast<size_t>(candidates_[i].value)] = static_cast<int>(i);
    std::vector<std::pair<double, size_t>> stalls;
    double compute_ready = 0;
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const program::Instruction& instruction = program.instructions[i];
      if (instruction.stream != program::Stream::kCompute ||
          instruction.kind == program::InstructionKind::kFree)
        continue;
      const sim::InstructionTiming& timing = evaluation.simulation.timings[i];
      const double stall = timing.start_s - compute_ready;
      compute_ready = timing.end_s;
      if (stall <= 0) continue;
      for (program::EventId event : instruction.waits) {
        const int value = fetch_of_event[static_cast<size_t>(event)];
        if (value < 0) continue;
        const int candidate = candidate_of_value[static_cast<size_t>(value)];
        if (candidate >= 0) stalls.emplace_back(stall, static_cast<size_t>(candidate));
      }
    }
    std::stable_sort(stalls.begin(), stalls.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    return stalls;
  }

  // The largest fetch lead that still fits, by bisection on a log scale from
  // no lead to the whole backward pass; kept only if it is faster.
  absl::StatusOr<Evaluation> SearchLeadCap(const std::vector<Decision>& decisions,
                                           Evaluation current) {
    const double no_lead = active_.lead_cap_s;
    active_.lead_cap_s = backward_s_;
    ASSIGN_OR_RETURN(Evaluation full, Evaluate(decisions));
    if (context_.Fits(full)) {
      if (full.step_time_s() < current.step_time_s()) return full;
      active_.lead_cap_s = no_lead;
      return current;
    }
    double fits = 0;
    double fails = backward_s_;
    Evaluation best = std::move(current);
    double best_cap = no_lead;
    for (int i = 0; i < options_.lead_cap_bisections && fails > 1e-6; ++i) {
      const double middle =
          fits > 0 ? std::sqrt(fits * fails) : fails * options_.lead_cap_first_fraction;
      active_.lead_cap_s = middle;
      ASSIGN_OR_RETURN(Evaluation trial, Evaluate(decisions));
      if (context_.Fits(trial)) {
        fits = middle;
        if (trial.step_time_s() < best.step_time_s()) {
          best = std::move(trial);
          best_cap = middle;
        }
      } else {
        fails = middle;
      }
    }
    active_.lead_cap_s = best_cap;
    return best;
  }

  // Advances the active refinement in passes of the moves below, each move
  // tried at most once per tensor in a pass, until a pass improves nothing or
  // the pass limit is reached (done), or until it has considered `quota`
  // more candidate plans (0: no quota). Advanced again, it goes on exactly as
  // if it had not stopped: the move lists are made afresh from the decisions
  // and what the pass has tried.
  absl::Status Advance(int quota) {
    slice_start_ = context_.evaluations();
    slice_end_ = quota > 0 ? slice_start_ + quota : std::numeric_limits<int>::max();
    absl::Status status = AdvanceSlice();
    active_.evaluations += context_.evaluations() - slice_start_;
    return status;
  }

  absl::Status AdvanceSlice() {
    Evaluation& current = *active_.current;
    if (!active_.lead_cap_searched) {
      active_.lead_cap_searched = true;
      const double before_s = current.step_time_s();
      ASSIGN_OR_RETURN(current, SearchLeadCap(active_.decisions, std::move(current)));
      if (current.step_time_s() < before_s) active_.evaluations_to_best = Considered();
    }
    const int passes = context_.options().max_refine_passes;
    while (!active_.done) {
      if (!active_.in_pass) {
        std::fill(active_.tried_rebuild.begin(), active_.tried_rebuild.end(), false);
        std::fill(active_.tried_keep.begin(), active_.tried_keep.end(), false);
        std::fill(active_.tried_exchange.begin(), active_.tried_exchange.end(), 0);
        std::fill(active_.tried_spill.begin(), active_.tried_spill.end(), false);
        std::fill(active_.tried_advance.begin(), active_.tried_advance.end(), 0);
        active_.pass_start_s = current.step_time_s();
        active_.in_pass = true;
      }
      ASSIGN_OR_RETURN(current, RefinePass(active_.decisions, std::move(current)));
      // The slice ran out, perhaps in the middle of a list of moves: the
      // pass goes on when the race comes back to this refinement.
      if (!hit_time_limit_ && !CapReached() && Left() == 0) return absl::OkStatus();
      active_.in_pass = false;
      ++active_.passes;
      active_.done = !(current.step_time_s() < active_.pass_start_s) ||
                     (passes > 0 && active_.passes >= passes) || hit_time_limit_ || CapReached();
    }
    return absl::OkStatus();
  }

  // One refinement move: a candidate's new decision (and fetch advance), and
  // the flag that records it was tried.
  enum class Tried { kRebuild, kAdvance, kSpill, kKeep, kExchange };
  struct Move {
    size_t index = 0;
    Decision decision = Decision::kKeep;
    int advance = 0;
    Tried tried = Tried::kRebuild;
    // An exchange also rebuilds a kept candidate, to make room: the
    // exchange partner of that rank (ExchangeMoves' order).
    struct Partner {
      size_t index = 0;
      int rank = 0;
    };
    std::optional<Partner> partner;
  };

  void MarkTried(const Move& move) {
    switch (move.tried) {
      case Tried::kRebuild:
        active_.tried_rebuild[move.index] = true;
        break;
      case Tried::kAdvance:
        active_.tried_advance[move.index] =
            std::max(active_.tried_advance[move.index], move.advance);
        break;
      case Tried::kSpill:
        active_.tried_spill[move.index] = true;
        break;
      case Tried::kKeep:
        active_.tried_keep[move.index] = true;
        break;
      case Tried::kExchange:
        active_.tried_exchange[move.index] =
            std::max(active_.tried_exchange[move.index], move.partner->rank + 1);
        break;
    }
  }

  // Tries the moves in order and keeps the first that leaves a plan that
  // fits and is faster by the minimum gain. The moves are evaluated several
  // at a time (PlanningContext::FirstBetter) with the result of trying them
  // one by one: the moves up to the kept one are marked tried, the rest are
  // not. The evaluation cap counts the same way.
  absl::StatusOr<bool> TryMoves(std::vector<Decision>& decisions, Evaluation& current,
                                std::vector<Move> moves) {
    const auto left = static_cast<size_t>(Left());
    if (moves.size() > left) moves.resize(left);
    auto plan_for = [&](size_t i) {
      const Move& move = moves[i];
      std::vector<Decision> trial = decisions;
      std::vector<int> advance = active_.fetch_advance;
      trial[move.index] = move.decision;
      advance[move.index] = move.advance;
      if (move.partner) trial[move.partner->index] = Decision::kRecompute;
      return MakePlan(trial, advance);
    };
    ASSIGN_OR_RETURN(auto accepted,
                     context_.FirstBetter(moves.size(), plan_for,
                                          current.step_time_s() * (1 - options_.min_gain)));
    const size_t tried = accepted ? accepted->first + 1 : moves.size();
    for (size_t i = 0; i < tried; ++i) MarkTried(moves[i]);
    if (!accepted) return false;
    active_.evaluations_to_best = Considered();
    const Move& move = moves[accepted->first];
    Apply(move.index, move.decision, decisions);
    active_.fetch_advance[move.index] = move.advance;
    if (move.partner) Apply(move.partner->index, Decision::kRecompute, decisions);
    current = std::move(accepted->second);
    return true;
  }

  // The moves of one kind, in the order they are tried; each is tried at
  // most once per tensor in a pass.
  std::vector<Move> StallMoves(const Evaluation& current, const std::vector<Decision>& decisions) {
    // A fetch that stalls the compute stream: rebuild the tensor instead if
    // that is cheaper than the wait, else fetch it earlier (doubling its
    // lead). A tensor behind several stalls is listed once.
    std::vector<Move> moves;
    std::vector<bool> listed(candidates_.size(), false);
    for (const auto& [stall, index] : FetchStalls(current)) {
      if (decisions[index] != Decision::kSpill || listed[index]) continue;
      listed[index] = true;
      if (candidates_[index].can_recompute && candidates_[index].recompute_s < stall &&
          !active_.tried_rebuild[index] && RecomputeAllowed(index, decisions)) {
        moves.push_back({index, Decision::kRecompute, 0, Tried::kRebuild, std::nullopt});
      }
      const int advance = 2 * active_.fetch_advance[index] + 2;
      if (active_.tried_advance[index] < advance) {
        moves.push_back({index, Decision::kSpill, advance, Tried::kAdvance, std::nullopt});
      }
    }
    return moves;
  }

  std::vector<Move> RebuildMoves(const std::vector<Decision>& decisions) {
    // Trade transfers for rebuilds, most bytes per rebuild-second first: the
    // link is shared, so a spill that hides its own copies can still delay
    // the fetches behind it.
    std::vector<size_t> spilled;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kSpill && !active_.tried_rebuild[i] &&
          RecomputeAllowed(i, decisions))
        spilled.push_back(i);
    }
    std::stable_sort(spilled.begin(), spilled.end(), [&](size_t a, size_t b) {
      return static_cast<double>(candidates_[a].bytes) / candidates_[a].recompute_s >
             static_cast<double>(candidates_[b].bytes) / candidates_[b].recompute_s;
    });
    std::vector<Move> moves;
    for (size_t i : spilled)
      moves.push_back({i, Decision::kRecompute, 0, Tried::kRebuild, std::nullopt});
    return moves;
  }

  std::vector<Move> SpillMoves(const std::vector<Decision>& decisions) {
    // And the other way: a rebuild whose transfer the link can hide now,
    // fetched early enough to hide the copy on the ideal timeline.
    std::vector<size_t> rebuilt;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] == Decision::kRecompute && !active_.tried_spill[i]) rebuilt.push_back(i);
    }
    std::stable_sort(rebuilt.begin(), rebuilt.end(), [&](size_t a, size_t b) {
      return candidates_[a].recompute_s > candidates_[b].recompute_s;
    });
    std::vector<Move> moves;
    for (size_t i : rebuilt) {
      const Candidate& c = candidates_[i];
      int lead = 0;
      while (c.first_backward - lead > c.produced + 1 &&
             context_.ideal_start_s(c.first_backward) -
                     context_.ideal_start_s(c.first_backward - lead) <
                 c.h2d_s) {
        ++lead;
      }
      moves.push_back({i, Decision::kSpill, lead, Tried::kSpill, std::nullopt});
    }
    return moves;
  }

  // The evicted (spilled or rebuilt) candidates that `untried` lets through,
  // the costliest first.
  template <typename Untried>
  std::vector<size_t> EvictedCostliestFirst(const std::vector<Decision>& decisions,
                                            Untried untried) const {
    std::vector<size_t> evicted;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (decisions[i] != Decision::kKeep && untried(i)) evicted.push_back(i);
    }
    std::stable_sort(evicted.begin(), evicted.end(),
                     [&](size_t a, size_t b) { return Cost(a, decisions) > Cost(b, decisions); });
    return evicted;
  }

  std::vector<Move> KeepMoves(const std::vector<Decision>& decisions) {
    // Bring back what costs most, if there is room for it now.
    std::vector<Move> moves;
    for (size_t i :
         EvictedCostliestFirst(decisions, [&](size_t k) { return !active_.tried_keep[k]; })) {
      moves.push_back({i, Decision::kKeep, 0, Tried::kKeep, std::nullopt});
    }
    return moves;
  }

  std::vector<Move> ExchangeMoves(const std::vector<Decision>& decisions) {
    // Where there is no room to bring a tensor back, make it: keep an
    // evicted tensor and rebuild instead a kept one that is as large, alive
    // at the same time, and cheaper to rebuild than the evicted one costs.
    const std::vector<size_t> evicted = EvictedCostliestFirst(decisions, [&](size_t k) {
      return active_.tried_exchange[k] < options_.exchange_partners;
    });
    // The kept tensors that may be rebuilt, the cheapest first.
    std::vector<size_t> rebuildable;
    for (size_t j = 0; j < candidates_.size(); ++j) {
      if (decisions[j] == Decision::kKeep && RecomputeAllowed(j, decisions))
        rebuildable.push_back(j);
    }
    std::stable_sort(rebuildable.begin(), rebuildable.end(), [&](size_t a, size_t b) {
      return candidates_[a].recompute_s < candidates_[b].recompute_s;
    });
    std::vector<Move> moves;
    for (size_t i : evicted) {
      const Candidate& c = candidates_[i];
      const double cost = Cost(i, decisions);
      // A slice of the race may have ended after the first partners: those
      // are not tried again in this pass.
      int rank = 0;
      for (size_t j : rebuildable) {
        const Candidate& k = candidates_[j];
        if (!(k.recompute_s < cost) || rank >= options_.exchange_partners) break;
        if (k.bytes < c.bytes || k.produced > c.first_backward || c.produced > k.first_backward)
          continue;
        if (rank >= active_.tried_exchange[i]) {
          moves.push_back({i, Decision::kKeep, 0, Tried::kExchange, Move::Partner{j, rank}});
        }
        ++rank;
      }
    }
    return moves;
  }

  // Tries the kinds of move in turn; after a kept move it starts again from
  // the stalls, which that move has shifted. Ends when no move of any kind
  // improves the plan.
  absl::StatusOr<Evaluation> RefinePass(std::vector<Decision>& decisions, Evaluation current) {
    bool improved = true;
    while (improved && !OutOfTime()) {
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, StallMoves(current, decisions)));
      if (improved || OutOfTime()) continue;
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, RebuildMoves(decisions)));
      if (improved || OutOfTime()) continue;
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, SpillMoves(decisions)));
      if (improved || OutOfTime()) continue;
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, KeepMoves(decisions)));
      if (improved || OutOfTime()) continue;
      ASSIGN_OR_RETURN(improved, TryMoves(decisions, current, ExchangeMoves(decisions)));
    }
    return current;
  }

  double Cost(size_t index, const std::vector<Decision>& decisions) const {
    const Candidate& c = candidates_[index];
    return decisions[index] == Decision::kRecompute ? c.recompute_s : c.UnhiddenTransferSeconds();
  }

  PlanningContext& context_;
  const HybridPolicy::Options options_;
  std::span<const HybridPolicy::Seed> seeds_;  // the policy's, which outlives the planner
  std::vector<Candidate> candidates_;
  std::vector<int> index_of_value_;  // candidate index of each value, -1 if none
  double forward_s_ = 0;
  double backward_s_ = 0;
  Refinement active_;  // the decisions being built or refined
  // The candidate count at which the active refinement's slice of the race
  // began and at which it ends (Advance).
  int slice_start_ = 0;
  int slice_end_ = std::numeric_limits<int>::max();
  bool hit_time_limit_ = false;
  std::unique_ptr<WorkerPool> pool_;  // for lines of search side by side, made on first use
};

}  // namespace

absl::StatusOr<PlanResult> HybridPolicy::Run(PlanningContext& context) {
  ASSIGN_OR_RETURN(PlanResult result, HybridPlanner(context, options_, seeds_).Run());
  if (!options_.other_orders || !context.options().every_backward_order) return result;
  using program::BackwardOrder;
  std::vector<std::vector<ir::NodeId>> planned = {context.schedule()};
  for (const BackwardOrder order :
       {BackwardOrder::kMemoryAware, BackwardOrder::kLookahead, BackwardOrder::kTopological}) {
    if (result.hit_time_limit) break;
    PlannerOptions options = context.options();
    options.backward_order = order;
    // One safety net for the whole run, and one count of candidates.
    options.time_limit_s = std::max(0.0, options.time_limit_s - context.run_seconds());
    if (options.progress) {
      options.progress = [&context, progress = options.progress](int evaluations) {
        progress(context.evaluations() + evaluations);
      };
    }
    PlanningContext other(context.graph(), context.cost_model(), context.hardware(), options);
    if (std::find(planned.begin(), planned.end(), other.schedule()) != planned.end()) continue;
    planned.push_back(other.schedule());
    result.orders_planned = static_cast<int>(planned.size());
    other.StartRun();
    absl::StatusOr<PlanResult> in_order = HybridPlanner(other, options_, seeds_).Run();
    context.Absorb(other);
    RETURN_IF_ERROR(in_order.status());
    result.hit_time_limit = result.hit_time_limit || in_order->hit_time_limit;
    // On a tie the earlier order's plan stays.
    if (Better(in_order->best, result.best, context.budget_bytes())) {
      result.best = std::move(in_order->best);
      result.start = std::move(in_order->start);
      result.race = std::move(in_order->race);
    }
  }
  return result;
}

}  // namespace spillway::planner
