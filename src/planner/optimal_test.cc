// The exact policy: its integer program is a relaxation of the rewriter, the
// arena and the simulator, so every plan that fits maps to a feasible point
// of it with the plan's step as objective (checked on every plan of a small
// graph, and on the heuristics' plans of small models), and its proven bound
// is at most the best plan found by enumerating them all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "fmt/format.h"
#include "planner/linear_program.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "planner/step_relaxation.h"
#include "planner/test_workload.h"
#include "program/test_graphs.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

using program::testing::ParseOrDie;
using program::testing::TrainingModel;

// Five relus of 2 MiB each and their backward pass: large enough that a copy
// takes longer than a kernel, so spilling stalls and the bound's windows bind.
constexpr std::string_view kLadder = R"(graph ladder {
  param %w: f32[512,1024]
  %x1: f32[512,1024] = relu(%w)
  %x2: f32[512,1024] = relu(%x1)
  %x3: f32[512,1024] = relu(%x2)
  %x4: f32[512,1024] = relu(%x3)
  %x5: f32[512,1024] = relu(%x4)
  %d5: f32[512,1024] = relu_backward(%x5, %x5) @backward
  %d4: f32[512,1024] = relu_backward(%d5, %x4) @backward
  %d3: f32[512,1024] = relu_backward(%d4, %x3) @backward
  %d2: f32[512,1024] = relu_backward(%d3, %x2) @backward
  %d1: f32[512,1024] = relu_backward(%d2, %x1) @backward
  output %d1
}
)";
// The same with a sum between the relus that no backward node reads: it is
// freed after the forward pass, so recomputing the relu after it re-runs the
// sum too (the program charges both).
constexpr std::string_view kLadderWithSums = R"(graph sums {
  param %w: f32[512,1024]
  %x1: f32[512,1024] = relu(%w)
  %s1: f32[512,1024] = add(%x1, %x1)
  %x2: f32[512,1024] = relu(%s1)
  %s2: f32[512,1024] = add(%x2, %x2)
  %x3: f32[512,1024] = relu(%s2)
  %s3: f32[512,1024] = add(%x3, %x3)
  %x4: f32[512,1024] = relu(%s3)
  %d4: f32[512,1024] = relu_backward(%x4, %x4) @backward
  %e3: f32[512,1024] = add(%d4, %d4) @backward
  %d3: f32[512,1024] = relu_backward(%e3, %x3) @backward
  %e2: f32[512,1024] = add(%d3, %d3) @backward
  %d2: f32[512,1024] = relu_backward(%e2, %x2) @backward
  %e1: f32[512,1024] = add(%d2, %d2) @backward
  %d1: f32[512,1024] = relu_backward(%e1, %x1) @backward
  output %d1
}
)";
constexpr int64_t kMiB = int64_t{1} << 20;

// Relative tolerance of a point's feasibility, in the program's units.
constexpr double kTolerance = 1e-6;

// Every plan of the ladder: each saved tensor kept, recomputed, or spilled
// and fetched either just in time or as early as the rewriter allows.
std::vector<program::Plan> EveryPlan(const PlanningContext& context) {
  std::vector<program::Plan> plans = {context.KeepAll("enumerated")};
  for (const autodiff::SavedTensor& tensor : context.saved()) {
    const ir::ValueId value = tensor.value;
    std::vector<program::Plan> next;
    for (const program::Plan& plan : plans) {
      next.push_back(plan);
      if (program::CanRecompute(context.graph(), value)) {
        next.push_back(plan);
        next.back().Recompute(value);
      }
      if (program::CanSpill(context.graph(), value)) {
        next.push_back(plan);
        next.back().Spill(value, -1);
        next.push_back(plan);
        next.back().Spill(value, context.last_forward_read(value) + 1);
      }
    }
    plans = std::move(next);
  }
  return plans;
}

struct Ladder : testing::TestWorkload {
  Ladder(std::string_view hardware, int64_t budget_bytes, std::string_view text = kLadder)
      : TestWorkload(text, hardware, budget_bytes) {}
};

TEST(Optimal, EveryPlanThatFitsIsAFeasiblePointAndTheBoundIsBelowTheBestOfThem) {
  if (!HaveMilpSolver()) GTEST_SKIP() << "built without CBC (coinor-libcbc-dev)";
  int lifted = 0;
  for (const auto& [text, graph_name] :
       {std::pair{kLadder, "ladder"}, std::pair{kLadderWithSums, "ladder with sums"}}) {
    for (std::string_view hardware : {"v100-16g-nvlink2", "h200-141g-pcie5"}) {
      // From budgets that some plan meets at no cost down to nearly the
      // smallest arena any plan reaches.
      int costly = 0;
      for (int64_t budget : {14 * kMiB, 12 * kMiB, 10 * kMiB, 9 * kMiB, 8 * kMiB}) {
        SCOPED_TRACE(fmt::format("{} on {}, budget {} MiB", graph_name, hardware, budget / kMiB));
        Ladder ladder(hardware, budget, text);
        absl::StatusOr<StepRelaxation> relaxation = StepRelaxation::Build(ladder.context);
        ASSERT_TRUE(relaxation.ok()) << StatusMessage(relaxation.status());
        double best_s = std::numeric_limits<double>::infinity();
        int fitting = 0;
        for (program::Plan& plan : EveryPlan(ladder.context)) {
          absl::StatusOr<Evaluation> evaluation = ladder.context.Evaluate(plan);
          ASSERT_TRUE(evaluation.ok()) << StatusMessage(evaluation.status());
          if (!ladder.context.Fits(*evaluation)) continue;
          ++fitting;
          best_s = std::min(best_s, evaluation->step_time_s());
          const std::vector<double> point = relaxation->PointOf(*evaluation);
          std::string worst;
          const double violation = relaxation->program().MaxViolation(point, &worst);
          ASSERT_LE(violation, kTolerance * (1 + evaluation->step_time_s() * 1e6))
              << "the plan breaks '" << worst << "'";
          EXPECT_NEAR(StepRelaxation::Seconds(relaxation->program().Objective(point)),
                      evaluation->step_time_s(), 1e-12);
        }
        if (fitting == 0) continue;  // below the smallest arena of the graph

        OptimalPolicy policy;
        absl::StatusOr<PlanResult> result = RunPolicy(policy, ladder.context);
        ASSERT_TRUE(result.ok()) << StatusMessage(result.status());
        ASSERT_TRUE(result->bound.has_value());
        EXPECT_TRUE(result->bound->solved);
        EXPECT_TRUE(result->feasible);
        EXPECT_LE(result->bound->step_s, best_s * (1 + 1e-9));
        EXPECT_LE(result->bound->step_s, result->best.step_time_s() * (1 + 1e-9));
        const double ideal_s = ladder.context.ideal_step_time_s();
        if (best_s > ideal_s * (1 + 1e-9)) ++costly;
        if (result->bound->step_s > ideal_s * (1 + 1e-9)) ++lifted;
      }
      EXPECT_GE(costly, 1) << graph_name << " on " << hardware;
    }
  }
  // A bound that cannot fail would be none's step. Where plans cost
  // something the relaxation need not see all of it (the layout's reuse
  // waits, say), but on the ladder on NVLink it sees some at every costly
  // budget: 10, 9 and 8 MiB.
  EXPECT_GE(lifted, 3);
}

TEST(Optimal, ItsPlanIsNeverSlowerThanHybridsAndTheSameInputGivesTheSamePlan) {
  if (!HaveMilpSolver()) GTEST_SKIP() << "built without CBC (coinor-libcbc-dev)";
  Ladder ladder("v100-16g-nvlink2", 10 * kMiB);
  HybridPolicy hybrid;
  absl::StatusOr<PlanResult> hybrid_result = RunPolicy(hybrid, ladder.context);
  ASSERT_TRUE(hybrid_result.ok());
  OptimalPolicy policy;
  absl::StatusOr<PlanResult> first = RunPolicy(policy, ladder.context);
  absl::StatusOr<PlanResult> second = RunPolicy(policy, ladder.context);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_LE(first->best.step_time_s(), hybrid_result->best.step_time_s());
  EXPECT_EQ(first->best.step_time_s(), second->best.step_time_s());
  EXPECT_EQ(first->bound->step_s, second->bound->step_s);
  for (const autodiff::SavedTensor& tensor : ladder.context.saved()) {
    EXPECT_EQ(first->best.plan.decision(tensor.value), second->best.plan.decision(tensor.value));
  }
}

TEST(Optimal, TheHeuristicsPlansOfSmallModelsAreFeasiblePointsOfBothPrograms) {
  // The relaxation's argument on real graphs: batch norm, donation, several
  // readers, recomputation chains. Every heuristic's plan that fits must map
  // to a feasible point of the exact policy's program and of the reduced LP
  // of LowerBoundOnStep, or a bound could be above a real plan.
  const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile("v100-16g-nvlink2");
  const analysis::RooflineCostModel cost_model(profile);
  for (const auto& [model, image, batch] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"resnet18", 64, 1}, {"resnet18", 96, 8}, {"unet", 32, 1}, {"gpt2", 16, 1}}) {
    const autodiff::TrainingGraph training = TrainingModel(model, image, 16, batch);
    PlanningContext unbounded(training.graph, cost_model, profile,
                              {.budget_bytes = std::numeric_limits<int64_t>::max()});
    absl::StatusOr<Evaluation> none = unbounded.Evaluate(unbounded.KeepAll("none"));
    ASSERT_TRUE(none.ok());
    const int64_t none_arena = none->arena_bytes();
    for (double fraction : {0.9, 0.75, 0.6}) {
      const int64_t budget = static_cast<int64_t>(fraction * static_cast<double>(none_arena));
      SCOPED_TRACE(fmt::format("{} {}px batch {} at {:.0f}% of none's arena", model, image, batch,
                               100 * fraction));
      PlanningContext context(training.graph, cost_model, profile, {.budget_bytes = budget});
      const StepBoundOptions reduced;
      absl::StatusOr<StepRelaxation> exact = StepRelaxation::Build(context);
      absl::StatusOr<StepRelaxation> lp = StepRelaxation::Build(context, reduced.relaxation);
      ASSERT_TRUE(exact.ok()) << StatusMessage(exact.status());
      ASSERT_TRUE(lp.ok()) << StatusMessage(lp.status());
      std::optional<PlanResult::Bound> bound;
      if (HaveMilpSolver()) {
        absl::StatusOr<PlanResult::Bound> proven = LowerBoundOnStep(context, reduced);
        ASSERT_TRUE(proven.ok()) << StatusMessage(proven.status());
        bound = *proven;
      }
      for (const std::string& name : PolicyNames()) {
        absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(name);
        ASSERT_TRUE(policy.ok());
        absl::StatusOr<PlanResult> result = RunPolicy(**policy, context);
        ASSERT_TRUE(result.ok()) << name << ": " << StatusMessage(result.status());
        if (!result->feasible) continue;
        // A plan that fetches a tensor twice is outside what the program
        // covers (docs/planner.md), and no bound is claimed for it.
        if (!BoundCovers(result->best.plan)) continue;
        const double tolerance = kTolerance * (1 + result->best.step_time_s() * 1e6);
        for (const StepRelaxation* relaxation : {&*exact, &*lp}) {
          std::string worst;
          const double violation =
              relaxation->program().MaxViolation(relaxation->PointOf(result->best), &worst);
          EXPECT_LE(violation, tolerance) << name << "'s plan breaks '" << worst << "'";
        }
        if (bound.has_value()) {
          EXPECT_LE(bound->step_s, result->best.step_time_s() * (1 + 1e-9)) << name;
        }
      }
    }
  }
}

TEST(Optimal, AGraphPastTheLimitsIsRefusedWithTheLimitsAndBoundedByAReducedProgram) {
  const autodiff::TrainingGraph training = TrainingModel("resnet152", 32);
  const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile("v100-16g-nvlink2");
  const analysis::RooflineCostModel cost_model(profile);
  PlanningContext context(training.graph, cost_model, profile, {.budget_bytes = 1 << 30});
  ASSERT_GT(context.saved().size(), static_cast<size_t>(kMaxRelaxationSavedTensors));
  absl::StatusOr<StepRelaxation> relaxation = StepRelaxation::Build(context);
  ASSERT_FALSE(relaxation.ok());
  EXPECT_EQ(relaxation.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(relaxation.status().message().find(
                fmt::format("at most {} and {}", kMaxRelaxationSavedTensors, kMaxRelaxationSteps)),
            std::string::npos)
      << relaxation.status().message();
  // --bound's reduced program takes it, within its cap on absent columns
  // even at a budget that every step is over.
  PlanningContext tight(training.graph, cost_model, profile, {.budget_bytes = 1});
  const StepBoundOptions reduced;
  absl::StatusOr<StepRelaxation> lp = StepRelaxation::Build(tight, reduced.relaxation);
  ASSERT_TRUE(lp.ok()) << StatusMessage(lp.status());
  int64_t absent = 0;
  for (const LinearProgram::Column& column : lp->program().columns()) {
    absent += column.name.starts_with("absent_") ? 1 : 0;
    EXPECT_FALSE(column.integer) << column.name;
  }
  EXPECT_GT(absent, 0);
  EXPECT_LE(absent, reduced.relaxation.max_absent_columns);
  EXPECT_LT(lp->over_budget_steps(), static_cast<int>(tight.schedule().size()));
}

// ResNet-152 at 7500x7500 makes bytes in its stem and first stage far faster
// than NVLink moves them out, so at 16 GB no plan keeps the ideal step: the
// early steps, well below the peak, are where the link falls short. A reduced
// program small enough to solve at once proves it only if it keeps those
// steps; ranked by bytes over the budget alone it kept the steps around the
// peak and proved no more than the ideal step (7.724 s against 7.797 s).
TEST(Optimal, AReducedProgramKeepsTheStepsWhereTheLinkFallsShort) {
  if (!HaveMilpSolver()) GTEST_SKIP() << "built without CBC (coinor-libcbc-dev)";
  const autodiff::TrainingGraph training = TrainingModel("resnet152", 7500);
  const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile("v100-16g-nvlink2");
  const analysis::RooflineCostModel cost_model(profile);
  PlanningContext context(training.graph, cost_model, profile, {.budget_bytes = 16408117248});
  StepBoundOptions reduced;
  reduced.relaxation.max_absent_columns = 2000;
  absl::StatusOr<PlanResult::Bound> bound = LowerBoundOnStep(context, reduced);
  ASSERT_TRUE(bound.ok()) << StatusMessage(bound.status());
  ASSERT_TRUE(bound->solved);
  EXPECT_GT(bound->step_s, context.ideal_step_time_s() * 1.005)
      << "ideal step " << context.ideal_step_time_s() << " s";
}

TEST(Optimal, TheModelIsWrittenInLpAndMpsForm) {
  if (!HaveMilpSolver()) GTEST_SKIP() << "built without CBC (coinor-libcbc-dev)";
  Ladder ladder("v100-16g-nvlink2", 10 * kMiB);
  absl::StatusOr<StepRelaxation> relaxation = StepRelaxation::Build(ladder.context);
  ASSERT_TRUE(relaxation.ok());
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "optimal_model";
  std::filesystem::create_directories(dir);
  for (std::string_view form : {"lp", "mps"}) {
    const std::string path = (dir / fmt::format("ladder.{}", form)).string();
    ASSERT_TRUE(WriteMilp(relaxation->program(), path).ok()) << path;
    EXPECT_GT(std::filesystem::file_size(path), 100u) << path;
  }
  const absl::Status unknown = WriteMilp(relaxation->program(), (dir / "ladder.txt").string());
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
}

// A MIP start is a point the caller has checked to be feasible, so CBC's
// claim that the program is infeasible can only be wrong (it has made one when
// its time limit stopped its preprocessing): the answer is then "stopped",
// with the start as its best solution and nothing proven. Without a start
// the same claim stands. The program here really is infeasible (x >= 1 and
// x <= 0), and the start breaks the promise, to reach the claim at will.
TEST(Optimal, AClaimOfInfeasibilityThatContradictsTheStartIsNotBelieved) {
  if (!HaveMilpSolver()) GTEST_SKIP() << "built without CBC (coinor-libcbc-dev)";
  LinearProgram program;
  const int x = program.AddColumn({.name = "x", .upper = 1, .objective = 1, .integer = true});
  const int y = program.AddColumn({.name = "y", .upper = 1, .objective = 2, .integer = true});
  program.AddRow({.name = "at least one", .terms = {{x, 1}, {y, 1}}, .lower = 1});
  program.AddRow({.name = "neither", .terms = {{x, 1}, {y, 1}}, .upper = 0});

  absl::StatusOr<SolverResult> without_start =
      SolveMilp(program, {.time_limit_s = 10, .start = {}});
  ASSERT_TRUE(without_start.ok()) << without_start.status();
  EXPECT_EQ(without_start->status, SolverResult::Status::kInfeasible);

  const std::vector<double> start = {0, 1};
  absl::StatusOr<SolverResult> with_start =
      SolveMilp(program, {.time_limit_s = 10, .start = start});
  ASSERT_TRUE(with_start.ok()) << with_start.status();
  EXPECT_EQ(with_start->status, SolverResult::Status::kStoppedWithSolution);
  EXPECT_EQ(with_start->point, start);
  EXPECT_EQ(with_start->objective, 2);
  EXPECT_EQ(with_start->bound, -kInfinity);
}

}  // namespace
}  // namespace spillway::planner
