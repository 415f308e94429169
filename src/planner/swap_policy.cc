#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "planner/policies.h"
#include "planner/refetch.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::planner {

std::vector<int> TopologicalLevels(const ir::Graph& graph,
                                   const std::vector<ir::NodeId>& schedule) {
  std::vector<int> level(static_cast<size_t>(graph.num_nodes()), 0);
  for (ir::NodeId id : schedule) {
    const ir::Node& node = graph.node(id);
    int deepest = 0;
    for (ir::ValueId input : node.inputs) {
      const ir::NodeId producer = graph.value(input).producer;
      if (producer != ir::kNoNode)
        deepest = std::max(deepest, level[static_cast<size_t>(producer)]);
    }
    for (ir::NodeId before : node.control_inputs) {
      deepest = std::max(deepest, level[static_cast<size_t>(before)]);
    }
    level[static_cast<size_t>(id)] = deepest + 1;
  }
  return level;
}

namespace {

struct SwapCandidate {
  ir::ValueId value = 0;
  int distance = 0;  // levels from the producer to the first backward reader
  int reader_level = 0;
  int first_backward_read = 0;
  int earliest_fetch = 0;  // the step after the last forward read
};

// The latest step in a range whose level is at most a target, in O(log n):
// a table of the least level over every run of 2^k steps (a sparse table),
// down which a search skips, from the right, the runs whose least level is
// above the target. A scan step by step made the swap start quadratic in
// the depth (15% of its time on a 1000-layer GPT-2).
class LatestAtMost {
 public:
  LatestAtMost() = default;
  explicit LatestAtMost(std::vector<int> levels) {
    minima_.push_back(std::move(levels));
    for (size_t width = 1; 2 * width <= minima_.front().size(); width *= 2) {
      const std::vector<int>& narrower = minima_.back();
      std::vector<int> wider(narrower.size() - width);
      for (size_t i = 0; i < wider.size(); ++i)
        wider[i] = std::min(narrower[i], narrower[i + width]);
      minima_.push_back(std::move(wider));
    }
  }

  int level(int step) const { return minima_.front()[static_cast<size_t>(step)]; }

  // The latest step in [first, last] whose level is at most `target`, or -1.
  int Find(int first, int last, int target) const {
    // Every step in [end, last] has a level above the target. Runs of
    // halving width are skipped at most once each: the steps skipped add up
    // in binary to the length of the run above the target.
    int end = last + 1;
    for (size_t k = minima_.size(); k-- > 0;) {
      const int width = 1 << k;
      if (end - width >= first && minima_[k][static_cast<size_t>(end - width)] > target)
        end -= width;
    }
    return end - 1 >= first ? end - 1 : -1;
  }

 private:
  std::vector<std::vector<int>> minima_;  // [k][i]: least level of steps i .. i + 2^k - 1
};

struct SwapSetup {
  LatestAtMost levels;  // of the schedule's steps
  std::vector<SwapCandidate> candidates;
  int max_distance = 0;
  int max_level = 0;
};

SwapSetup Setup(const PlanningContext& context) {
  const ir::Graph& graph = context.graph();
  const std::vector<int> level = TopologicalLevels(graph, context.schedule());
  SwapSetup setup;
  std::vector<int> level_at_step;
  for (ir::NodeId id : context.schedule()) level_at_step.push_back(level[static_cast<size_t>(id)]);
  setup.levels = LatestAtMost(std::move(level_at_step));
  setup.max_level = *std::max_element(level.begin(), level.end());
  for (const autodiff::SavedTensor& saved : context.saved()) {
    if (!context.CanSpill(saved.value)) continue;
    const int read = context.first_backward_read(saved.value);
    if (read == program::ScheduleReads::kNever) continue;
    SwapCandidate candidate;
    candidate.value = saved.value;
    candidate.first_backward_read = read;
    candidate.reader_level = setup.levels.level(read);
    candidate.distance = candidate.reader_level - level[static_cast<size_t>(saved.producer)];
    candidate.earliest_fetch = context.last_forward_read(saved.value) + 1;
    setup.max_distance = std::max(setup.max_distance, candidate.distance);
    setup.candidates.push_back(candidate);
  }
  return setup;
}

// TFLMS triggers the fetch from an op `ahead` levels before the reader: the
// latest step before the reader whose level is at most that. Ahead 0 fetches
// just in time, before the reader itself: the least memory swapping can use.
int FetchStep(const SwapSetup& setup, const SwapCandidate& candidate, int ahead) {
  if (ahead == 0) return -1;
  const int step = setup.levels.Find(candidate.earliest_fetch, candidate.first_backward_read - 1,
                                     candidate.reader_level - ahead);
  return step >= 0 ? step : candidate.earliest_fetch;
}

program::Plan PlanFrom(const PlanningContext& context, const SwapSetup& setup, int threshold,
                       int ahead) {
  program::Plan plan = context.KeepAll("swap");
  for (const SwapCandidate& candidate : setup.candidates) {
    if (candidate.distance > threshold)
      plan.Spill(candidate.value, FetchStep(setup, candidate, ahead));
  }
  return plan;
}

}  // namespace

program::Plan SwapPolicy::PlanFor(const PlanningContext& context, int threshold, int ahead) {
  return PlanFrom(context, Setup(context), threshold, ahead);
}

absl::StatusOr<PlanResult> SwapPolicy::Run(PlanningContext& context) {
  const SwapSetup setup = Setup(context);
  auto evaluate = [&](int threshold, int ahead) {
    return context.Evaluate(PlanFrom(context, setup, threshold, ahead));
  };
  // The searches below only ask whether a setting fits.
  auto evaluate_if_fits = [&](int threshold, int ahead) {
    return context.EvaluateIfFits(PlanFrom(context, setup, threshold, ahead));
  };
  PlanResult result;
  // Nothing spilled: if that fits there is nothing to tune.
  ASSIGN_OR_RETURN(Evaluation keep_all, evaluate(setup.max_distance, 0));
  if (context.Fits(keep_all)) {
    result.best = std::move(keep_all);
    return result;
  }
  // Everything spilled, fetched just in time: the least memory swapping reaches.
  ASSIGN_OR_RETURN(Evaluation all, evaluate(-1, 0));
  if (!context.Fits(all)) {
    if (!context.options().fetch_twice) {
      result.best = std::move(all);
      return result;
    }
    // Fetching twice the tensors held across the memory peak lowers it further.
    const PeakRefetcher refetcher(context.graph(), context.schedule(), /*host_link=*/true);
    ASSIGN_OR_RETURN(result.best,
                     refetcher.Lower<Evaluation>(
                         std::move(all), options_.refetch_rounds,
                         [&](program::Plan plan) { return context.Evaluate(std::move(plan)); },
                         [&](const Evaluation& evaluation) { return context.Fits(evaluation); }));
    return result;
  }
  // The largest threshold that fits (fewest spills), by binary search; memory
  // grows with the threshold.
  int low = -1;                   // fits
  int high = setup.max_distance;  // does not fit
  while (high - low > 1) {
    const int middle = low + (high - low) / 2;
    ASSIGN_OR_RETURN(std::optional<Evaluation> trial, evaluate_if_fits(middle, 0));
    if (trial) {
      low = middle;
    } else {
      high = middle;
    }
  }
  // For that threshold and the ones below it (three by default), the largest lookahead that fits,
  // also by binary search (fetching earlier holds more memory); the fastest wins.
  std::optional<Evaluation> best;
  for (int threshold = low; threshold >= std::max(-1, low - options_.thresholds_tuned + 1);
       --threshold) {
    int fits = 0;
    int fails = setup.max_level + 1;
    ASSIGN_OR_RETURN(std::optional<Evaluation> fitting, evaluate_if_fits(threshold, fits));
    if (!fitting) continue;
    while (fails - fits > 1) {
      const int middle = fits + (fails - fits) / 2;
      ASSIGN_OR_RETURN(std::optional<Evaluation> trial, evaluate_if_fits(threshold, middle));
      if (trial) {
        fits = middle;
        fitting = std::move(trial);
      } else {
        fails = middle;
      }
    }
    if (!best || Better(*fitting, *best, context.budget_bytes())) best = std::move(fitting);
  }
  SPILLWAY_CHECK(best.has_value(), "the threshold found by the search fits");
  result.best = *std::move(best);
  return result;
}

}  // namespace spillway::planner
