#include "planner/chain_checkpointing.h"

#include <gtest/gtest.h>

#include <random>
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
