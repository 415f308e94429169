// swap-lms: TFLMS v2's choices on a hand-made graph whose levels are easy to
// count, and its auto-tuning order on a model over a sweep of budgets.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "fmt/format.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "planner/test_workload.h"
#include "program/test_graphs.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

using program::testing::ParseOrDie;

// Six relus and their backward pass, every tensor f32[16,16] (1 KiB, rank 2:
// TFLMS never swaps scalars or vectors). Levels (w is level 0, a graph input):
//   x1..x6 = relu(...)             levels 1..6
//   d6 = relu_backward(x6, x6)     level 7, reads x6
//   dk = relu_backward(d(k+1), xk) level 13-k for k = 5..1, reads xk
// so xk's backward reader is 12-2k+1 levels after it: x5 3, x4 5, x3 7, x2 9,
// x1 11; its forward reader x(k+1) is 1 level after it.
constexpr std::string_view kLadder = R"(graph ladder {
  param %w: f32[16,16]
  %x1: f32[16,16] = relu(%w)
  %x2: f32[16,16] = relu(%x1)
  %x3: f32[16,16] = relu(%x2)
  %x4: f32[16,16] = relu(%x3)
  %x5: f32[16,16] = relu(%x4)
  %x6: f32[16,16] = relu(%x5)
  %d6: f32[16,16] = relu_backward(%x6, %x6) @backward
  %d5: f32[16,16] = relu_backward(%d6, %x5) @backward
  %d4: f32[16,16] = relu_backward(%d5, %x4) @backward
  %d3: f32[16,16] = relu_backward(%d4, %x3) @backward
  %d2: f32[16,16] = relu_backward(%d3, %x2) @backward
  %d1: f32[16,16] = relu_backward(%d2, %x1) @backward
  output %d1
}
)";

struct Ladder : testing::TestWorkload {
  explicit Ladder(int64_t budget_bytes = int64_t{1} << 40)
      : TestWorkload(kLadder, "v100-16g-nvlink2", budget_bytes) {}
};

TEST(SwapLms, LevelsCountTheLongestPathFromTheGraphInputs) {
  const Ladder ladder;
  const LmsModel model(ladder.context);
  EXPECT_EQ(model.level(ladder.Node("x1")), 1);
  EXPECT_EQ(model.level(ladder.Node("x6")), 6);
  EXPECT_EQ(model.level(ladder.Node("d6")), 7);
  EXPECT_EQ(model.level(ladder.Node("d1")), 12);
  EXPECT_EQ(model.levels(), 13);  // levels 0..12, as TFLMS counts them
}

TEST(SwapLms, ATensorIsSwappedWhenAConsumerIsMoreThanThresholdLevelsAway) {
  const Ladder ladder;
  const LmsModel model(ladder.context);
  // Strictly more: x3's backward reader is 7 levels away, so threshold 7
  // keeps it and 6 swaps it; x6's only reader is 1 level away.
  auto swapped = [&](int threshold) {
    std::vector<std::string> names;
    for (ir::ValueId value : model.Swapped(threshold))
      names.push_back(ladder.graph.value(value).name);
    return names;
  };
  EXPECT_EQ(swapped(6), (std::vector<std::string>{"x1", "x2", "x3"}));
  EXPECT_EQ(swapped(7), (std::vector<std::string>{"x1", "x2"}));
  EXPECT_EQ(swapped(10), (std::vector<std::string>{"x1"}));
  EXPECT_TRUE(swapped(11).empty());
  EXPECT_EQ(swapped(1).size(), 5u);  // every tensor read back more than a level later
}

TEST(SwapLms, TheSwapInIsTriggeredMoreThanAheadLevelsBeforeItsConsumer) {
  const Ladder ladder;
  const LmsModel model(ladder.context);
  const ir::ValueId x1 = ladder.Value("x1");  // read back by d1, level 12
  // ahead 1: the search starts at level 12 - 1 - 1 = 10, where d3 reaches d1.
  EXPECT_EQ(model.Trigger(x1, {.threshold = 1, .ahead = 1}), ladder.Node("d3"));
  // ahead 3: level 8, d5.
  EXPECT_EQ(model.Trigger(x1, {.threshold = 1, .ahead = 3}), ladder.Node("d5"));
  // ahead 10: level 1, the producer's own, where the search may not go: no
  // trigger in the window, so TFLMS makes the swap-in synchronous, waiting
  // for the consumer's other producer, d2.
  EXPECT_EQ(model.Trigger(x1, {.threshold = 1, .ahead = 10}), ladder.Node("d2"));
  // Synchronous swap-ins (sync_mode 2 and 3) wait for that producer whatever
  // `ahead` says.
  EXPECT_EQ(model.Trigger(x1, {.threshold = 1, .ahead = 3, .sync_mode = 2}), ladder.Node("d2"));
}

TEST(SwapLms, TheSearchNeverReachesTheProducersLevel) {
  const Ladder ladder;
  // With a window of 2 levels: x3 is made at level 3 and read back by d3 at
  // level 10; with ahead 6 the search would start at level 3, the
  // producer's, so it finds nothing and the swap-in waits for the
  // consumer's other producer, d4; with ahead 5 it starts at level 4, where
  // x4 reaches d3 through d4. (Every op at level k has an input at level
  // k - 1, so along data edges the first level searched always holds an op
  // that reaches the consumer: the window matters only where control edges
  // raise levels.)
  const LmsModel model(ladder.context, {.trigger_search_levels = 2});
  EXPECT_EQ(model.Trigger(ladder.Value("x3"), {.threshold = 1, .ahead = 6}), ladder.Node("d4"));
  EXPECT_EQ(model.Trigger(ladder.Value("x3"), {.threshold = 1, .ahead = 5}), ladder.Node("x4"));
}

TEST(SwapLms, ThePlanFetchesAfterTheTriggerOrJustInTime) {
  const Ladder ladder;
  const LmsModel model(ladder.context);
  const program::Plan plan = model.PlanFor({.threshold = 6, .ahead = 3});
  for (std::string_view name : {"x1", "x2", "x3"}) {
    EXPECT_EQ(plan.decision(ladder.Value(name)), program::Decision::kSpill) << name;
  }
  for (std::string_view name : {"x4", "x5", "x6"}) {
    EXPECT_EQ(plan.decision(ladder.Value(name)), program::Decision::kKeep) << name;
  }
  // x1's trigger at ahead 3 is d5: the fetch is issued before the step after it.
  EXPECT_EQ(plan.at(ladder.Value("x1")).fetch_step, ladder.context.step_of(ladder.Node("d5")) + 1);
  const program::Plan synchronous = model.PlanFor({.threshold = 6, .ahead = 3, .sync_mode = 2});
  EXPECT_EQ(synchronous.at(ladder.Value("x1")).fetch_step, -1);
}

TEST(SwapLms, ItsBudgetIsTheDeviceMemoryLessTheTrainableVariablesTimesTheRatio) {
  const Ladder ladder(100 * 1024);
  EXPECT_EQ(LmsModel(ladder.context).budget_bytes(), static_cast<int64_t>((100 - 1) * 1024 * 0.9));
  EXPECT_EQ(LmsModel(ladder.context, {.memory_ratio = 0.5}).budget_bytes(), (100 - 1) * 1024 / 2);
}

TEST(SwapLms, AutoTuningTriesNoSwapThenSyncModesThenTheLargestThresholdThenTheLargestAhead) {
  // The ladder over budgets from ample to impossible, in steps of 64 bytes:
  // each stage of the tuning decides the outcome somewhere, and every
  // outcome is the one that stage's rule gives.
  bool unswapped = false, asynchronous = false, raised = false, failed = false;
  for (int64_t budget = 32 * 1024; budget > 1024; budget -= 64) {
    SCOPED_TRACE(fmt::format("budget {} bytes", budget));
    const Ladder ladder(budget);
    const PlanningContext& context = ladder.context;
    const LmsModel model(context);
    const LmsModel::Tuning tuning = model.Tune();
    const LmsSetting& s = tuning.setting;
    if (!tuning.swaps) {  // the graph fits unswapped
      unswapped = true;
      EXPECT_TRUE(model.Fits({.threshold = model.levels(), .ahead = 1}));
      continue;
    }
    EXPECT_FALSE(model.Fits({.threshold = model.levels(), .ahead = 1}));
    if (!tuning.fits) {  // not even the most swapping, most synchronous setting
      failed = true;
      EXPECT_FALSE(model.Fits({.threshold = 1, .ahead = 1, .sync_mode = 3}));
      continue;
    }
    // The first sync_mode at which threshold 1 fits.
    EXPECT_TRUE(model.Fits({.threshold = 1, .ahead = 1, .sync_mode = s.sync_mode}));
    if (s.sync_mode > 0) {
      raised = true;
      EXPECT_FALSE(model.Fits({.threshold = 1, .ahead = 1, .sync_mode = s.sync_mode - 1}));
    } else {
      asynchronous = true;
    }
    // The bisection's answers fit, and one more does not (or is the end).
    EXPECT_TRUE(model.Fits(s));
    if (s.threshold < model.levels()) {
      EXPECT_FALSE(
          model.Fits({.threshold = s.threshold + 1, .ahead = 1, .sync_mode = s.sync_mode}));
    }
    if (s.sync_mode < 2 && s.ahead < model.levels()) {
      EXPECT_FALSE(model.Fits({s.threshold, s.ahead + 1, s.sync_mode}));
    }
  }
  EXPECT_TRUE(unswapped);
  EXPECT_TRUE(asynchronous);
  EXPECT_TRUE(raised);
  EXPECT_TRUE(failed);
}

TEST(SwapLms, ThePolicyNamesItsSettingAndTheSpillwayArenaJudgesIt) {
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet18", 64);
  const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile("v100-16g-nvlink2");
  const analysis::RooflineCostModel cost_model(profile);
  PlanningContext unlimited(training.graph, cost_model, profile,
                            {.budget_bytes = int64_t{1} << 40});
  SwapLmsPolicy policy;
  absl::StatusOr<PlanResult> ample = RunPolicy(policy, unlimited);
  ASSERT_TRUE(ample.ok()) << StatusMessage(ample.status());
  EXPECT_EQ(ample->tuning.rfind("no swapping", 0), 0u) << ample->tuning;
  const int64_t none_arena = ample->best.arena_bytes();

  PlanningContext half(training.graph, cost_model, profile, {.budget_bytes = none_arena / 2});
  absl::StatusOr<PlanResult> result = RunPolicy(policy, half);
  ASSERT_TRUE(result.ok()) << StatusMessage(result.status());
  EXPECT_EQ(result->tuning.rfind("threshold ", 0), 0u) << result->tuning;
  EXPECT_GT(result->best.plan.Count(program::Decision::kSpill), 0);
  // Whatever TFLMS believed, feasibility is Spillway's arena against the budget.
  EXPECT_EQ(result->feasible, result->best.arena_bytes() <= none_arena / 2);
  // And what it evaluated is the plan of the setting TFLMS's tuning chose.
  const LmsModel model(half);
  const program::Plan tuned = model.PlanFor(model.Tune().setting);
  for (const ir::Value& value : training.graph.values()) {
    EXPECT_EQ(result->best.plan.decision(value.id), tuned.decision(value.id)) << value.name;
    EXPECT_EQ(result->best.plan.at(value.id).fetch_step, tuned.at(value.id).fetch_step)
        << value.name;
  }
}

}  // namespace
}  // namespace spillway::planner
