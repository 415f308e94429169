#include "program/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "program/test_graphs.h"
#include "support/status_macros.h"

namespace spillway::program {
namespace {

using testing::ChainText;
using ::testing::HasSubstr;
using testing::ParseOrDie;

TEST(Plan, DecisionNamesRoundTrip) {
  for (Decision decision : {Decision::kKeep, Decision::kSpill, Decision::kRecompute}) {
    EXPECT_EQ(ParseDecision(DecisionName(decision)), decision);
  }
  EXPECT_EQ(ParseDecision("swap"), std::nullopt);
}

TEST(Plan, StartsWithEverythingKeptAndCountsDecisions) {
  const ir::Graph graph = ParseOrDie(ChainText());
  Plan plan("manual", graph);
  EXPECT_EQ(plan.size(), static_cast<size_t>(graph.num_values()));
  EXPECT_EQ(plan.Count(Decision::kKeep), graph.num_values());
  plan.Spill(*graph.FindValue("a"), 4);
  plan.Recompute(*graph.FindValue("b"));
  EXPECT_EQ(plan.Count(Decision::kSpill), 1);
  EXPECT_EQ(plan.Count(Decision::kRecompute), 1);
  EXPECT_EQ(plan.at(*graph.FindValue("a")).fetch_step, 4);
  plan.Keep(*graph.FindValue("a"));
  EXPECT_EQ(plan.decision(*graph.FindValue("a")), Decision::kKeep);
  EXPECT_EQ(plan.at(*graph.FindValue("a")).fetch_step, -1);
}

TEST(Plan, OnlyForwardActivationsCanBeSpilledOrRecomputed) {
  const ir::Graph graph = ParseOrDie(ChainText());
  EXPECT_TRUE(CanSpill(graph, *graph.FindValue("a")));
  EXPECT_TRUE(CanRecompute(graph, *graph.FindValue("a")));
  EXPECT_FALSE(CanSpill(graph, *graph.FindValue("w")));  // a parameter
  EXPECT_FALSE(CanRecompute(graph, *graph.FindValue("w")));
  EXPECT_FALSE(CanSpill(graph, *graph.FindValue("db")));  // a gradient
  EXPECT_FALSE(CanRecompute(graph, *graph.FindValue("db")));
}

TEST(Plan, StatisticsAndInPlaceOutputsOfBatchNormStay) {
  const ir::Graph graph = ParseOrDie(
      "graph bn {\n"
      "  input %x: f32[1,2,2,4] nhwc\n"
      "  param %gamma: f32[4]\n"
      "  param %beta: f32[4]\n"
      "  buffer %rm: f32[4]\n"
      "  buffer %rv: f32[4]\n"
      "  %bn: f32[1,2,2,4] nhwc, %bn.saved_mean: f32[4], %bn.saved_inv_std: f32[4], "
      "%bn.running_mean: f32[4], %bn.running_var: f32[4] = "
      "batch_norm(%x, %gamma, %beta, %rm, %rv) {epsilon=1e-05, momentum=0.1, training=true}\n"
      "  output %bn\n"
      "}\n");
  EXPECT_TRUE(CanRecompute(graph, *graph.FindValue("bn")));
  // Statistics can travel to the host but are not rebuilt on their own.
  EXPECT_TRUE(CanSpill(graph, *graph.FindValue("bn.saved_mean")));
  EXPECT_FALSE(CanRecompute(graph, *graph.FindValue("bn.saved_mean")));
  // Running statistics are written over the buffers: neither.
  EXPECT_FALSE(CanSpill(graph, *graph.FindValue("bn.running_mean")));
  EXPECT_FALSE(CanRecompute(graph, *graph.FindValue("bn.running_var")));
}

TEST(Plan, PinsOverrideTheDecision) {
  const ir::Graph graph = ParseOrDie(ChainText("spill", "recompute", "keep"));
  Plan plan("pinned", graph);
  plan.Spill(*graph.FindValue("c"));
  ASSERT_TRUE(ApplyPins(graph, plan).ok());
  EXPECT_EQ(plan.decision(*graph.FindValue("a")), Decision::kSpill);
  EXPECT_EQ(plan.decision(*graph.FindValue("b")), Decision::kRecompute);
  EXPECT_EQ(plan.decision(*graph.FindValue("c")), Decision::kKeep);
}

TEST(Plan, ImpossiblePinsAreErrors) {
  const ir::Graph graph = ParseOrDie(
      "graph g {\n"
      "  param %w: f32[256]\n"
      "  %a: f32[256] = relu(%w)\n"
      "  %da: f32[256] = relu_backward(%a, %a) {memory=\"spill\"} @backward\n"
      "  output %da\n"
      "}\n");
  Plan plan("pinned", graph);
  absl::Status status = ApplyPins(graph, plan);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(StatusMessage(status), HasSubstr("node 'da'"));
  EXPECT_THAT(StatusMessage(status), HasSubstr("cannot be spilled"));
}

}  // namespace
}  // namespace spillway::program
