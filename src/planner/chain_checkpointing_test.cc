#include "planner/chain_checkpointing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

namespace spillway::planner {
namespace {

TEST(ChainCheckpointing, PeakAndCostFollowTheModel) {
  const std::vector<ChainTensor> chain{{4, 1}, {2, 5}, {3, 1}, {5, 2}};
  // Checkpoint t2 only: segments {t1} (4) and {t3, t4} (8): peak 2 + 8 = 10,
  // rebuilding t1, t3 and t4 costs 1 + 1 + 2 = 4 s.
  const std::vector<bool> checkpoint{false, true, false, false};
  EXPECT_EQ(ChainPeak(chain, checkpoint), 10);
  EXPECT_DOUBLE_EQ(ChainRebuildSeconds(chain, checkpoint), 4);
  // Everything kept: 14 bytes, nothing rebuilt. Nothing kept: one segment of 14.
  EXPECT_EQ(ChainPeak(chain, {true, true, true, true}), 14);
  EXPECT_EQ(ChainPeak(chain, {false, false, false, false}), 14);
  EXPECT_DOUBLE_EQ(ChainRebuildSeconds(chain, {false, false, false, false}), 9);
}

TEST(ChainCheckpointing, SolvesAHandExample) {
  const std::vector<ChainTensor> chain{{4, 1}, {2, 5}, {3, 1}, {5, 2}};
  // With 14 bytes everything stays. With 10: keep t2 (expensive, small) and
  // t4 (segments {t1} 4 and {t3} 3: 2 + 5 + 4 = 11 > 10, no); keep t2 alone
  // (peak 10, cost 4) or t2 and t3 (2 + 3 + max(4, 5) = 10, cost 1 + 2 = 3):
  // the second is best.
  EXPECT_TRUE(SolveChain(chain, 14).feasible);
  EXPECT_DOUBLE_EQ(SolveChain(chain, 14).rebuild_s, 0);
  const ChainSolution ten = SolveChain(chain, 10);
  ASSERT_TRUE(ten.feasible);
  EXPECT_EQ(ten.checkpoint, (std::vector<bool>{false, true, true, false}));
  EXPECT_DOUBLE_EQ(ten.rebuild_s, 3);
  EXPECT_EQ(ten.peak_bytes, 10);
  // Below the largest tensor nothing works: every plan holds some segment or
  // checkpoint of 5 bytes, plus what the others need.
  EXPECT_FALSE(SolveChain(chain, 4).feasible);
}

TEST(ChainCheckpointing, MatchesBruteForceOnRandomShortChains) {
  std::mt19937 random(20201210);
  std::uniform_int_distribution<int> length(1, 11);
  std::uniform_int_distribution<int64_t> bytes(1, 64);
  std::uniform_real_distribution<double> seconds(0.1, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ChainTensor> chain(static_cast<size_t>(length(random)));
    int64_t total = 0;
    for (ChainTensor& tensor : chain) {
      tensor = {bytes(random), seconds(random)};
      total += tensor.bytes;
    }
    std::uniform_int_distribution<int64_t> limit(0, total + 8);
    const int64_t budget = limit(random);
    const ChainSolution exact = BruteForceChain(chain, budget);
    const ChainSolution solved = SolveChain(chain, budget);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", limit " << budget);
    ASSERT_EQ(solved.feasible, exact.feasible);
    if (!exact.feasible) continue;
    EXPECT_NEAR(solved.rebuild_s, exact.rebuild_s, 1e-9);
    EXPECT_LE(solved.peak_bytes, budget);
    EXPECT_EQ(solved.peak_bytes, ChainPeak(chain, solved.checkpoint));
    EXPECT_NEAR(solved.rebuild_s, ChainRebuildSeconds(chain, solved.checkpoint), 1e-9);
  }
}

// The dynamic program as first written, for comparison: at each position,
// every state of every position in reach is gathered and sorted (ties broken
// by the later previous checkpoint, or with `later_first` false the earlier,
// then the lower index), then pruned.
struct SortedState {
  int64_t kept = 0;
  double saved_s = 0;
  int from = -1;
  int parent = -1;
};

ChainSolution SolveChainBySorting(std::span<const ChainTensor> chain, int64_t limit,
                                  const ChainOptions& options, bool later_first = true) {
  using State = SortedState;
  const int n = static_cast<int>(chain.size());
  double total_s = 0;
  for (const ChainTensor& tensor : chain) total_s += tensor.rebuild_s;
  std::vector<int64_t> prefix{0};
  for (const ChainTensor& tensor : chain) prefix.push_back(prefix.back() + tensor.bytes);
  auto between = [&](int a, int b) {
    return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a) + 1];
  };
  ChainSolution best;
  for (int64_t segment : ChainSegmentSizes(chain, limit, options.segment_candidates)) {
    const int64_t room = limit - segment;
    if (room < 0) continue;
    std::vector<std::vector<State>> frontier{{State{}}};  // the chain input's
    frontier.resize(static_cast<size_t>(n) + 2);
    for (int i = 0; i <= n; ++i) {
      std::vector<State> states;
      for (int from = i - 1; from >= -1 && between(from, i) <= segment; --from) {
        const std::vector<State>& there = frontier[static_cast<size_t>(from) + 1];
        for (size_t k = 0; k < there.size(); ++k) {
          State next = there[k];
          if (i < n) {
            next.kept += chain[static_cast<size_t>(i)].bytes;
            next.saved_s += chain[static_cast<size_t>(i)].rebuild_s;
          }
          next.from = from;
          next.parent = static_cast<int>(k);
          if (next.kept <= room) states.push_back(next);
        }
      }
      // Gathered by falling `from`, then rising index: a stable sort keeps
      // that order among exact ties unless told to prefer the earlier `from`.
      std::stable_sort(states.begin(), states.end(), [&](const State& a, const State& b) {
        if (a.kept != b.kept) return a.kept < b.kept;
        if (a.saved_s != b.saved_s) return a.saved_s > b.saved_s;
        return !later_first && a.from < b.from;
      });
      std::vector<State> pruned;
      for (const State& state : states) {
        if (pruned.empty() || state.saved_s > pruned.back().saved_s) pruned.push_back(state);
      }
      if (options.max_frontier > 0 && static_cast<int>(pruned.size()) > options.max_frontier) {
        std::vector<State> thinned;
        const double stride = static_cast<double>(pruned.size() - 1) / (options.max_frontier - 1);
        for (int k = 0; k < options.max_frontier; ++k) {
          thinned.push_back(pruned[static_cast<size_t>(std::lround(k * stride))]);
        }
        pruned = std::move(thinned);
      }
      frontier[static_cast<size_t>(i) + 1] = std::move(pruned);
    }
    const std::vector<State>& ends = frontier[static_cast<size_t>(n) + 1];
    if (ends.empty() || (best.feasible && total_s - ends.back().saved_s >= best.rebuild_s))
      continue;
    std::vector<bool> checkpoint(static_cast<size_t>(n), false);
    for (int position = ends.back().from, index = ends.back().parent; position >= 0;) {
      checkpoint[static_cast<size_t>(position)] = true;
      const State& state = frontier[static_cast<size_t>(position) + 1][static_cast<size_t>(index)];
      position = state.from;
      index = state.parent;
    }
    best = {true, checkpoint, ChainPeak(chain, checkpoint), total_s - ends.back().saved_s};
  }
  return best;
}

TEST(ChainCheckpointing, TheSlidingWindowChoosesWhatSortingEveryStateChooses) {
  // Chains of a few repeated layers, whose plans tie exactly (rebuild times
  // are whole seconds, so sums are exact), exact and on a grid with a capped
  // frontier: the same checkpoints, not only the same cost.
  std::mt19937 random(20261207);
  std::uniform_int_distribution<int> length(1, 40);
  std::uniform_int_distribution<int> kinds(1, 3);
  std::uniform_int_distribution<int64_t> bytes(1, 8);
  std::uniform_int_distribution<int> seconds(0, 4);
  const ChainOptions capped{.segment_candidates = 6, .max_frontier = 4};
  int feasible = 0;
  int decided_by_ties = 0;  // where the other tie rule keeps other checkpoints
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ChainTensor> layer(static_cast<size_t>(kinds(random)));
    for (ChainTensor& tensor : layer)
      tensor = {bytes(random), static_cast<double>(seconds(random))};
    std::vector<ChainTensor> chain(static_cast<size_t>(length(random)));
    int64_t total = 0;
    for (size_t i = 0; i < chain.size(); ++i) {
      chain[i] = layer[i % layer.size()];
      total += chain[i].bytes;
    }
    std::uniform_int_distribution<int64_t> limit(0, total + 4);
    const int64_t budget = limit(random);
    for (const ChainOptions& options : {ChainOptions{}, capped}) {
      SCOPED_TRACE(::testing::Message() << "trial " << trial << ", limit " << budget << ", grid "
                                        << options.segment_candidates);
      const ChainSolution sorted = SolveChainBySorting(chain, budget, options);
      const ChainSolution solved = SolveChain(chain, budget, options);
      ASSERT_EQ(solved.feasible, sorted.feasible);
      EXPECT_EQ(solved.checkpoint, sorted.checkpoint);
      EXPECT_EQ(solved.rebuild_s, sorted.rebuild_s);
      EXPECT_EQ(solved.peak_bytes, sorted.peak_bytes);
      if (solved.feasible && layer.size() < chain.size()) ++feasible;
      if (solved.feasible &&
          SolveChainBySorting(chain, budget, options, /*later_first=*/false).checkpoint !=
              solved.checkpoint)
        ++decided_by_ties;
    }
  }
  EXPECT_GT(feasible, 100);
  // The sample reaches exact ties whose rule decides the plan.
  EXPECT_GT(decided_by_ties, 0);
}

TEST(ChainCheckpointing, TheGridAndFrontierCapStillGiveValidPlans) {
  // A long uniform chain: sqrt(n) checkpoints are near optimal; with a capped
  // search the plan must still respect the limit and rebuild at most
  // everything.
  std::vector<ChainTensor> chain(400, ChainTensor{1 << 20, 0.001});
  const int64_t limit = 48LL << 20;  // 48 tensors' worth; sqrt-style needs ~2*sqrt(400) = 40
  const ChainSolution solved =
      SolveChain(chain, limit, {.segment_candidates = 24, .max_frontier = 64});
  ASSERT_TRUE(solved.feasible);
  EXPECT_LE(solved.peak_bytes, limit);
  EXPECT_LT(solved.rebuild_s, 0.4);  // not everything rebuilt: checkpoints were kept
}

TEST(ChainCheckpointing, AStopReturnsTheBestFinishedCandidate) {
  const std::vector<ChainTensor> chain(40, ChainTensor{.bytes = 10, .rebuild_s = 1});
  int polls = 0;
  const ChainSolution stopped = SolveChain(chain, 120, {.stop = [&polls] { return ++polls > 3; }});
  EXPECT_FALSE(stopped.feasible);  // stopped inside the first candidate
  EXPECT_EQ(polls, 4);
  const ChainSolution solved = SolveChain(chain, 120);
  EXPECT_TRUE(solved.feasible);
}

}  // namespace
}  // namespace spillway::planner
