// Planning with costs that do not come from the roofline: graphs that come
// with their own (node-link files of `opaque` nodes), and measured costs
// files; and planning for a device without a host link.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/costs_file.h"
#include "analysis/hardware.h"
#include "fmt/format.h"
#include "nodelink/node_link.h"
#include "planner/linear_program.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "planner/step_relaxation.h"
#include "program/verifier.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

// A chain of `layers` forward nodes, a loss, and the backward chain: b_i
// reads b_{i+1} and f_{i-1} (the layer's input), like a linear network's
// training step. Forward nodes take 1 ms, backward 2 ms; activations are
// 64 MiB, gradients 64 MiB, the loss 4 bytes.
std::string ChainGraph(int layers) {
  std::vector<std::string> nodes;
  std::vector<std::string> links;
  auto node = [&](const std::string& id, double ms, int64_t bytes, const char* phase) {
    nodes.push_back(fmt::format(R"({{"id": "{}", "duration": {}, "size": {}, "phase": "{}"}})", id,
                                ms * 1e-3, bytes, phase));
  };
  auto link = [&](const std::string& from, const std::string& to) {
    links.push_back(fmt::format(R"({{"source": "{}", "target": "{}"}})", from, to));
  };
  for (int i = 0; i < layers; ++i) {
    node(fmt::format("f{}", i), 1, 64 * kMiB, "forward");
    if (i > 0) link(fmt::format("f{}", i - 1), fmt::format("f{}", i));
  }
  node("loss", 1, 4, "forward");
  link(fmt::format("f{}", layers - 1), "loss");
  for (int i = layers - 1; i >= 0; --i) {
    node(fmt::format("b{}", i), 2, 64 * kMiB, "backward");
    link(i == layers - 1 ? "loss" : fmt::format("b{}", i + 1), fmt::format("b{}", i));
    if (i > 0) link(fmt::format("f{}", i - 1), fmt::format("b{}", i));
  }
  return fmt::format(R"({{"nodes": [{}], "links": [{}]}})", fmt::join(nodes, ", "),
                     fmt::join(links, ", "));
}

struct GraphFileWorkload {
  GraphFileWorkload(const std::string& text, int64_t budget_bytes, bool host_link)
      : costed(*nodelink::ParseNodeLinkGraph(text, {})),
        profile(*analysis::LoadHardwareProfile("h200-141g-pcie5")),
        cost_model({costed.node_seconds.begin(), costed.node_seconds.end()},
                   std::make_unique<analysis::RooflineCostModel>(profile)),
        context(costed.graph, cost_model, profile,
                {.budget_bytes = budget_bytes, .host_link = host_link}) {}
  nodelink::CostedGraph costed;
  analysis::HardwareProfile profile;
  analysis::TabulatedCostModel cost_model;
  PlanningContext context;
};

absl::StatusOr<PlanResult> Plan(std::string_view policy, PlanningContext& context) {
  ASSIGN_OR_RETURN(std::unique_ptr<Policy> made, MakePolicy(policy));
  return RunPolicy(*made, context);
}

TEST(GraphFile, TheFilesDurationsAreTheStepWithNothingToMove) {
  GraphFileWorkload w(ChainGraph(8), int64_t{100} << 30, /*host_link=*/true);
  absl::StatusOr<PlanResult> none = Plan("none", w.context);
  ASSERT_TRUE(none.ok()) << none.status();
  ASSERT_TRUE(none->feasible);
  // 8 forward nodes and the loss at 1 ms, 8 backward ones at 2 ms, back to back.
  EXPECT_NEAR(none->best.step_time_s(), 9e-3 + 16e-3, 1e-12);
  EXPECT_TRUE(program::VerifyProgram(none->best.program).ok());
}

TEST(GraphFile, RecomputationReRunsANodeAtItsDurationAndSpillsUseTheLink) {
  // Keeping everything needs 8 activations and two gradients at once; four
  // fewer activations leave room only by recomputing or spilling some.
  GraphFileWorkload w(ChainGraph(8), 7 * 64 * kMiB, /*host_link=*/true);
  absl::StatusOr<PlanResult> recompute = Plan("recompute", w.context);
  ASSERT_TRUE(recompute.ok()) << recompute.status();
  ASSERT_TRUE(recompute->feasible);
  const int recomputed = recompute->best.plan.Count(program::Decision::kRecompute);
  ASSERT_GT(recomputed, 0);
  // Every saved activation is one forward node's output: each recomputation
  // is that node again, 1 ms.
  EXPECT_NEAR(recompute->best.simulation.recompute_s, recomputed * 1e-3, 1e-12);

  absl::StatusOr<PlanResult> swap = Plan("swap", w.context);
  ASSERT_TRUE(swap.ok()) << swap.status();
  const int64_t spilled = swap->best.simulation.d2h_bytes;
  ASSERT_GT(spilled, 0);
  EXPECT_EQ(spilled % (64 * kMiB), 0);

  absl::StatusOr<PlanResult> hybrid = Plan("hybrid", w.context);
  ASSERT_TRUE(hybrid.ok()) << hybrid.status();
  ASSERT_TRUE(hybrid->feasible);
  EXPECT_LE(hybrid->best.step_time_s(), recompute->best.step_time_s());
  if (swap->feasible) {
    EXPECT_LE(hybrid->best.step_time_s(), swap->best.step_time_s());
  }
}

TEST(NoHostLink, OnlyRecomputationPlansAndTheSpillingPoliciesSayWhy) {
  GraphFileWorkload w(ChainGraph(8), 7 * 64 * kMiB, /*host_link=*/false);
  absl::StatusOr<PlanResult> recompute = Plan("recompute", w.context);
  ASSERT_TRUE(recompute.ok()) << recompute.status();
  EXPECT_TRUE(recompute->feasible);
  EXPECT_EQ(recompute->best.plan.Count(program::Decision::kSpill), 0);
  int refusing = 0;
  for (const PolicyEntry& entry : PolicyRegistry()) {
    if (!entry.needs_host_link) continue;
    ++refusing;
    const std::string& policy = entry.name;
    absl::StatusOr<PlanResult> refused = Plan(policy, w.context);
    ASSERT_FALSE(refused.ok()) << policy;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(StatusMessage(refused.status())),
                HasSubstr(fmt::format("{} spills to host memory, and the device has no host link",
                                      policy)));
  }
  EXPECT_EQ(refusing, 5);  // swap, swap-lms, hybrid-seed, hybrid-seed-lms, hybrid
  // A plan that spills is refused whoever makes it.
  program::Plan spilling = w.context.KeepAll("test");
  spilling.Spill(*w.costed.graph.FindValue("f3"));
  absl::StatusOr<Evaluation> evaluated = w.context.Evaluate(spilling);
  ASSERT_FALSE(evaluated.ok());
  EXPECT_THAT(std::string(StatusMessage(evaluated.status())),
              HasSubstr("spills 'f3', but the device has no host link"));
}

TEST(NoHostLink, TheRelaxationHasNoSpillColumnsAndOptimalStartsFromRecompute) {
  GraphFileWorkload w(ChainGraph(6), 6 * 64 * kMiB, /*host_link=*/false);
  absl::StatusOr<StepRelaxation> relaxation = StepRelaxation::Build(w.context);
  ASSERT_TRUE(relaxation.ok()) << relaxation.status();
  int recompute_columns = 0;
  for (const LinearProgram::Column& column : relaxation->program().columns()) {
    if (column.name.starts_with("recompute_")) ++recompute_columns;
    EXPECT_FALSE(column.name.starts_with("spill_")) << column.name;
  }
  // f0..f4 and the loss: the forward values backward nodes read.
  EXPECT_EQ(recompute_columns, 6);
  if (!HaveMilpSolver()) GTEST_SKIP() << "built without CBC (coinor-libcbc-dev)";
  absl::StatusOr<PlanResult> recompute = Plan("recompute", w.context);
  absl::StatusOr<PlanResult> optimal = Plan("optimal", w.context);
  ASSERT_TRUE(recompute.ok()) << recompute.status();
  ASSERT_TRUE(optimal.ok()) << optimal.status();
  ASSERT_TRUE(optimal->feasible);
  ASSERT_TRUE(optimal->bound.has_value());
  EXPECT_EQ(optimal->best.plan.Count(program::Decision::kSpill), 0);
  EXPECT_LE(optimal->best.step_time_s(), recompute->best.step_time_s());
  EXPECT_LE(optimal->bound->step_s, optimal->best.step_time_s() * (1 + 1e-9));
}

// hybrid's plan for the 8-node chain at 7 of its 64 MiB values, from a
// costs file: forward nodes `forward_s`, backward 2 ms, copies 1 GB/s either
// way (64 MiB: 67 ms).
program::Plan PlanWithMeasuredCosts(const nodelink::CostedGraph& costed, double forward_s,
                                    std::optional<analysis::Contention> contention = std::nullopt) {
  const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile("h200-141g-pcie5");
  analysis::MeasuredCosts costs;
  costs.measured_on = {
      .machine = "test", .backend = "cpu", .threads = 1, .isa = "generic", .date = "2026-12-04"};
  for (const ir::Node& node : costed.graph.nodes()) {
    costs.node_seconds[node.name] = node.phase == ir::Phase::kForward ? forward_s : 2e-3;
  }
  costs.device_to_host = {{0, 0}, {1'000'000'000, 1.0}};
  costs.host_to_device = costs.device_to_host;
  costs.contention = contention;
  absl::StatusOr<analysis::MeasuredCostModel> model = analysis::MakeMeasuredCostModel(
      costs, costed.graph, std::make_unique<analysis::RooflineCostModel>(profile));
  EXPECT_TRUE(model.ok()) << model.status();
  PlanningContext context(costed.graph, *model->model, profile, {.budget_bytes = 7 * 64 * kMiB});
  absl::StatusOr<PlanResult> result = Plan("hybrid", context);
  EXPECT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->feasible);
  return result->best.plan;
}

// The same graph and budget under two costs files that differ only in the
// forward nodes' times: cheap to re-run, the planner recomputes; slow to
// re-run, it spills instead.
TEST(MeasuredCosts, TheyFlipTheChoiceBetweenSpillingAndRecomputing) {
  const nodelink::CostedGraph costed = *nodelink::ParseNodeLinkGraph(ChainGraph(8), {});
  const program::Plan cheap = PlanWithMeasuredCosts(costed, 1e-3);
  EXPECT_GT(cheap.Count(program::Decision::kRecompute), 0);
  EXPECT_EQ(cheap.Count(program::Decision::kSpill), 0);
  const program::Plan slow = PlanWithMeasuredCosts(costed, 1.0);
  EXPECT_GT(slow.Count(program::Decision::kSpill), 0);
  EXPECT_EQ(slow.Count(program::Decision::kRecompute), 0);
}

// Forward nodes of 0.1 s and 67 ms copies: with copies and kernels
// independent, spilling hides its copies and mostly beats re-running a node
// (the plan spills two tensors and rebuilds one: 1.016 s, where spilling all
// three steps 1.040 s). Where they contend (a copy running 11 times slower
// beside a kernel, and a kernel beside a copy), the copies steal more than
// recomputation costs, and the planner recomputes instead.
TEST(MeasuredCosts, ContentionMakesThePlannerRecomputeWhereACopyWouldStealMore) {
  const nodelink::CostedGraph costed = *nodelink::ParseNodeLinkGraph(ChainGraph(8), {});
  const program::Plan independent = PlanWithMeasuredCosts(costed, 0.1);
  EXPECT_GT(independent.Count(program::Decision::kSpill), 1);
  EXPECT_LE(independent.Count(program::Decision::kRecompute), 1);
  const program::Plan contended = PlanWithMeasuredCosts(
      costed, 0.1, analysis::Contention{.compute_slowdown = 10, .copy_slowdown = 10});
  EXPECT_GT(contended.Count(program::Decision::kRecompute), 0);
  EXPECT_EQ(contended.Count(program::Decision::kSpill), 0);
}

}  // namespace
}  // namespace spillway::planner
