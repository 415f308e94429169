// The hybrid planner's guarantees, as properties over a sweep rather than
// hand-picked cases: on a small model of every built-in family, on every
// hardware preset and at six budgets from the smallest arena any policy
// reaches up to the arena of `none`,
//   - `hybrid` fits whenever `swap`, `swap-lms`, `recompute` or `hybrid-seed`
//     fits, and is never slower than any of them;
//   - `hybrid`'s step time never grows when the budget does;
//   - in a budget sweep, a budget that also refines the plan of the budget
//     below (a seed) plans no slower than alone.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "program/program.h"
#include "program/schedule.h"
#include "program/test_graphs.h"
#include "program/verifier.h"
#include "program/workspaces.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

struct Workload {
  std::string model;
  int64_t image = 0;
};

PlanResult Plan(std::string_view policy_name, const ir::Graph& graph,
                const analysis::HardwareProfile& profile, PlannerOptions options) {
  const analysis::RooflineCostModel cost_model(profile);
  PlanningContext context(graph, cost_model, profile, options);
  absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(policy_name);
  SPILLWAY_CHECK(policy.ok(), "every listed policy can be made");
  absl::StatusOr<PlanResult> result = RunPolicy(**policy, context);
  EXPECT_TRUE(result.ok()) << policy_name << ": " << StatusMessage(result.status());
  if (!result.ok()) return PlanResult{};
  return *std::move(result);
}

PlanResult Plan(std::string_view policy_name, const ir::Graph& graph,
                const analysis::HardwareProfile& profile, int64_t budget_bytes) {
  return Plan(policy_name, graph, profile, PlannerOptions{.budget_bytes = budget_bytes});
}

// The tests below that check how hybrid searches (not what it finds) plan
// small batch-1 models in autodiff's backward order: in the memory-aware one
// their `none` arena is already down to parameters, gradients and momentum,
// and nothing is left to search.
constexpr program::BackwardOrder kAutodiffOrder = program::BackwardOrder::kTopological;

// A budget `fraction` of the way from the smallest arena hybrid reaches to
// the arena `none` needs (in `order`, else the planner's choice).
int64_t BudgetBetween(const ir::Graph& graph, const analysis::HardwareProfile& profile,
                      double fraction, std::optional<program::BackwardOrder> order = {}) {
  const int64_t none_arena =
      Plan("none", graph, profile, {.budget_bytes = INT64_MAX, .backward_order = order})
          .best.arena_bytes();
  const int64_t floor = Plan("hybrid", graph, profile, {.budget_bytes = 1, .backward_order = order})
                            .smallest_arena_bytes;
  return floor + static_cast<int64_t>(fraction * static_cast<double>(none_arena - floor));
}

class Portfolio : public ::testing::TestWithParam<Workload> {};

TEST_P(Portfolio, HybridIsNeverWorseThanABaselineAndNeverSlowerWithMoreMemory) {
  const autodiff::TrainingGraph training =
      program::testing::TrainingModel(GetParam().model, GetParam().image);
  for (const analysis::HardwareProfile& hardware : analysis::HardwarePresets()) {
    const std::string& preset = hardware.name;
    const analysis::HardwareProfile* profile = &hardware;
    const analysis::RooflineCostModel cost_model(*profile);
    const int64_t none_arena = Plan("none", training.graph, *profile, INT64_MAX).best.arena_bytes();
    // The smallest arena any policy reaches: each reports it when nothing fits.
    int64_t floor = none_arena;
    for (std::string_view name : {"swap", "recompute", "hybrid-seed", "hybrid"}) {
      floor = std::min(floor, Plan(name, training.graph, *profile, 1).smallest_arena_bytes);
    }
    ASSERT_LT(floor, none_arena) << preset << ": nothing can be spilled or recomputed";
    double previous_step = 0;  // hybrid's, at the previous (smaller) budget
    bool previous_feasible = false;
    std::optional<Evaluation> swept;  // a sweep's plan at the previous budget (session/sweep.h)
    for (int k = 0; k < 6; ++k) {
      const int64_t budget = floor + (none_arena - floor) * k / 5;
      SCOPED_TRACE(fmt::format("{} on {} at {} bytes ({}/5 of the way from {} to {})",
                               GetParam().model, preset, budget, k, floor, none_arena));
      const PlanResult hybrid = Plan("hybrid", training.graph, *profile, budget);
      for (std::string_view name : {"swap", "swap-lms", "recompute", "hybrid-seed"}) {
        const PlanResult baseline = Plan(name, training.graph, *profile, budget);
        if (!baseline.feasible) continue;
        EXPECT_TRUE(hybrid.feasible) << name << " fits and hybrid does not";
        if (!hybrid.feasible) continue;
        EXPECT_LE(hybrid.best.step_time_s(), baseline.best.step_time_s())
            << name << " is faster (hybrid refined from " << hybrid.start << ")";
      }
      if (previous_feasible) {
        EXPECT_TRUE(hybrid.feasible) << "hybrid fitted a smaller budget";
        // Up to the simulator's rounding: the same plan in two backward
        // orders (all kept, say) sums its step in another order.
        EXPECT_LE(hybrid.best.step_time_s(), previous_step * (1 + 1e-12))
            << "hybrid is slower than at the previous, smaller budget";
      }
      // In a sweep the budget also refines the previous budget's plan: never
      // slower than alone, and the previous plan fits here as it is.
      if (swept) {
        PlanningContext context(training.graph, cost_model, *profile, {.budget_bytes = budget});
        HybridPolicy seeded_policy({}, {{"the previous budget's", *swept}});
        const absl::StatusOr<PlanResult> seeded = RunPolicy(seeded_policy, context);
        ASSERT_TRUE(seeded.ok()) << StatusMessage(seeded.status());
        EXPECT_TRUE(seeded->feasible) << "a sweep fitted a smaller budget";
        EXPECT_LE(seeded->best.step_time_s(), hybrid.best.step_time_s())
            << "a seed made the plan slower than alone";
        EXPECT_LE(swept->arena_bytes(), budget);
        if (Better(seeded->best, *swept, budget)) swept = seeded->best;
      } else if (hybrid.feasible) {
        swept = hybrid.best;
      }
      previous_feasible = hybrid.feasible;
      previous_step = hybrid.best.step_time_s();
    }
  }
}

TEST(Portfolio, AnEvictionStartForATighterBudgetKeepsMoreMemoryFromSlowingThePlan) {
  // ResNet-18 at 224x224, batch 16, on the H200's PCIe link, at 76% and 79%
  // of its `none` arena (a finer grid than the sweep above). With only its
  // eviction for the budget, hybrid's plan at the larger budget is 1.7%
  // slower than at the smaller: that eviction evicts less, and the
  // refinements stop at worse local optima. The eviction for 90% of the
  // budget gives the larger budget a start with room to spare.
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet18", 224, 16, 16);
  const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile("h200-141g-pcie5");
  const analysis::RooflineCostModel cost_model(profile);
  const int64_t none_arena = Plan("none", training.graph, profile, INT64_MAX).best.arena_bytes();
  auto hybrid = [&](double budget_share, double tight_eviction_share) {
    const auto budget = static_cast<int64_t>(budget_share * static_cast<double>(none_arena));
    PlanningContext context(training.graph, cost_model, profile, {.budget_bytes = budget});
    HybridPolicy policy({.tight_eviction_share = tight_eviction_share});
    absl::StatusOr<PlanResult> result = RunPolicy(policy, context);
    SPILLWAY_CHECK(result.ok() && result->feasible, "both budgets fit");
    return *std::move(result);
  };
  const double smaller = 0.55 + 0.45 * 11 / 24;
  const double larger = 0.55 + 0.45 * 13 / 24;
  const HybridOptions defaults;
  ASSERT_GT(defaults.tight_eviction_share, 0);
  ASSERT_LT(defaults.tight_eviction_share, 1);

  const double without_smaller = hybrid(smaller, 0).best.step_time_s();
  const double without_larger = hybrid(larger, 0).best.step_time_s();
  ASSERT_GT(without_larger, without_smaller * 1.01)
      << "without the tight start this case no longer plans the larger budget slower: it "
         "no longer shows what the start is for";

  const PlanResult with_smaller = hybrid(smaller, defaults.tight_eviction_share);
  const PlanResult with_larger = hybrid(larger, defaults.tight_eviction_share);
  EXPECT_LE(with_larger.best.step_time_s(), with_smaller.best.step_time_s());
  EXPECT_LT(with_larger.best.step_time_s(), without_larger);
  EXPECT_EQ(with_larger.start, "evict-tight");
  EXPECT_TRUE(std::ranges::any_of(
      with_smaller.race, [](const PlanResult::Refinement& r) { return r.start == "evict-tight"; }));
}

TEST(HybridSeed, APlanFromASmallerBudgetIsAStartAndTheResultIsNeverSlowerThanIt) {
  // The case above, without the evict-tight start: the larger budget plans
  // 1.7% slower than the smaller. Given the smaller budget's plan as a seed
  // (a budget sweep does so), the larger budget plans at least as fast, and
  // what the run does without the seed is unchanged; a seed made in another
  // backward order is left out, its fetch steps being another schedule's.
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet18", 224, 16, 16);
  const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile("h200-141g-pcie5");
  const analysis::RooflineCostModel cost_model(profile);
  const int64_t none_arena = Plan("none", training.graph, profile, INT64_MAX).best.arena_bytes();
  auto budget = [&](double share) {
    return static_cast<int64_t>(share * static_cast<double>(none_arena));
  };
  auto hybrid = [&](int64_t budget_bytes, std::vector<HybridPolicy::Seed> seeds,
                    std::optional<program::BackwardOrder> order) {
    PlanningContext context(training.graph, cost_model, profile,
                            {.budget_bytes = budget_bytes, .backward_order = order});
    HybridPolicy policy({.tight_eviction_share = 0}, std::move(seeds));
    absl::StatusOr<PlanResult> result = RunPolicy(policy, context);
    SPILLWAY_CHECK(result.ok() && result->feasible, "both budgets fit");
    return *std::move(result);
  };
  const int64_t smaller = budget(0.55 + 0.45 * 11 / 24);
  const int64_t larger = budget(0.55 + 0.45 * 13 / 24);
  const std::optional<program::BackwardOrder> order;  // the planner's choice
  const PlanResult at_smaller = hybrid(smaller, {}, order);
  const PlanResult unseeded = hybrid(larger, {}, order);
  ASSERT_GT(unseeded.best.step_time_s(), at_smaller.best.step_time_s() * 1.01)
      << "the larger budget no longer plans slower: the case no longer shows what a seed is for";

  const PlanResult seeded = hybrid(larger, {{"the smaller budget's", at_smaller.best}}, order);
  EXPECT_LE(seeded.best.step_time_s(), at_smaller.best.step_time_s());
  EXPECT_LE(seeded.best.arena_bytes(), larger);
  // The seed is refined after everything the run does without it, which
  // stays as it was.
  ASSERT_EQ(seeded.race.size(), unseeded.race.size() + 1);
  for (size_t i = 0; i < unseeded.race.size(); ++i) {
    EXPECT_EQ(seeded.race[i].start, unseeded.race[i].start);
    EXPECT_EQ(seeded.race[i].step_s, unseeded.race[i].step_s);
    EXPECT_EQ(seeded.race[i].evaluations, unseeded.race[i].evaluations);
  }
  EXPECT_EQ(seeded.race.back().start, "the smaller budget's");

  const PlanResult other_order = hybrid(smaller, {}, program::BackwardOrder::kMemoryAware);
  ASSERT_NE(other_order.best.program.schedule, at_smaller.best.program.schedule);
  const PlanResult ignored = hybrid(larger, {{"another order's", other_order.best}}, order);
  EXPECT_TRUE(std::ranges::none_of(
      ignored.race, [](const PlanResult::Refinement& r) { return r.start == "another order's"; }));
  EXPECT_EQ(ignored.best.step_time_s(), unseeded.best.step_time_s());
}

// The roofline, slowed down: every copy it times (the simulator asks for each
// copy of each candidate) first sleeps, as on a loaded or slower machine.
class SlowCostModel final : public analysis::CostModel {
 public:
  explicit SlowCostModel(const analysis::HardwareProfile& profile) : roofline_(profile) {}
  double NodeSeconds(const ir::Graph& graph, const ir::Node& node) const override {
    return roofline_.NodeSeconds(graph, node);
  }
  double CopySeconds(int64_t bytes, analysis::CopyDirection direction) const override {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    return roofline_.CopySeconds(bytes, direction);
  }

 private:
  analysis::RooflineCostModel roofline_;
};

// On a GPU profile every Program reserves the kernels' workspace
// (program/workspaces.h) at the top of its arena, and a plan that fits the
// budget fits it with the region; on the CPU profile there is none.
TEST(Workspace, EveryPlanForAGpuReservesItInsideTheBudget) {
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet18", 32);
  const ir::Graph& graph = training.graph;
  for (const char* preset : {"h200-141g-pcie5", "cpu"}) {
    const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile(preset);
    const int64_t region = program::WorkspaceRegionBytes(graph, profile.workspace_limit_bytes);
    EXPECT_EQ(region > 0, std::string_view(preset) != "cpu") << preset;
    const int64_t none_arena = Plan("none", graph, profile, INT64_MAX).best.arena_bytes();
    for (const char* policy : {"none", "swap", "recompute", "hybrid"}) {
      const std::string_view name(policy);
      const int64_t budget = name == "none" ? none_arena : BudgetBetween(graph, profile, 0.5);
      const PlanResult result = Plan(policy, graph, profile, budget);
      const program::Program& program = result.best.program;
      EXPECT_EQ(program.workspace_bytes, region) << preset << " " << policy;
      if (region > 0) {
        EXPECT_EQ(program.arena_bytes, program.workspace_offset + region)
            << preset << " " << policy;
      }
      if (name == "none" || name == "hybrid") {
        EXPECT_TRUE(result.feasible) << preset << " " << policy;
      }
      if (result.feasible) {
        EXPECT_LE(result.best.arena_bytes(), budget) << preset << " " << policy;
      }
      const absl::Status verified = program::VerifyProgram(program);
      EXPECT_TRUE(verified.ok()) << preset << " " << policy << ": " << StatusMessage(verified);
    }
  }
}

TEST(Portfolio, ThePlanDoesNotDependOnHowFastTheMachineIs) {
  // ResNet-50 at 256x256 on a PCIe part, a third of the way from the smallest
  // arena it can reach to the one it needs unplanned: every start is refined
  // for many candidates. The same planning with every copy timing slowed
  // down gives the same Program.
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet50", 256);
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("h100-80g-pcie5");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  const int64_t budget = BudgetBetween(training.graph, *profile, 1.0 / 3, kAutodiffOrder);
  const PlanResult fast = Plan("hybrid", training.graph, *profile,
                               {.budget_bytes = budget, .backward_order = kAutodiffOrder});
  ASSERT_TRUE(fast.feasible);
  EXPECT_FALSE(fast.hit_time_limit);

  const SlowCostModel slow_model(*profile);
  PlanningContext context(training.graph, slow_model, *profile,
                          {.budget_bytes = budget, .backward_order = kAutodiffOrder});
  HybridPolicy hybrid;
  absl::StatusOr<PlanResult> slow = RunPolicy(hybrid, context);
  ASSERT_TRUE(slow.ok()) << StatusMessage(slow.status());
  EXPECT_GT(slow->planning_s, 1.5 * fast.planning_s) << "the slowdown did not slow planning";
  EXPECT_EQ(slow->evaluations, fast.evaluations);
  EXPECT_EQ(slow->start, fast.start);
  EXPECT_EQ(program::ProgramToText(slow->best.program), program::ProgramToText(fast.best.program));
}

TEST(Portfolio, HybridInEveryOrderKeepsTheFastestOrdersPlan) {
  // --backward-order each: hybrid plans in the context's order and then in
  // each other order whose schedule differs, exactly as it would in that
  // order alone, and returns the fastest of those plans (the earliest on a
  // tie), counting every candidate of every order.
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet50", 128);
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("h100-80g-pcie5");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  const int64_t budget = BudgetBetween(training.graph, *profile, 0.5);
  const PlanResult each =
      Plan("hybrid", training.graph, *profile,
           {.budget_bytes = budget, .every_backward_order = true, .threads = 1});
  ASSERT_TRUE(each.feasible);

  const analysis::RooflineCostModel cost_model(*profile);
  const program::BackwardOrder first =
      PlanningContext(training.graph, cost_model, *profile, {.budget_bytes = budget})
          .backward_order();
  std::vector<program::BackwardOrder> orders = {first};
  for (const program::BackwardOrder order :
       {program::BackwardOrder::kMemoryAware, program::BackwardOrder::kLookahead,
        program::BackwardOrder::kTopological}) {
    if (order != first) orders.push_back(order);
  }
  std::vector<std::vector<ir::NodeId>> schedules;
  std::optional<PlanResult> fastest;
  int evaluations = 0;
  for (const program::BackwardOrder order : orders) {
    std::vector<ir::NodeId> schedule = program::TrainingSchedule(training.graph, order);
    if (std::find(schedules.begin(), schedules.end(), schedule) != schedules.end()) continue;
    schedules.push_back(std::move(schedule));
    PlanResult alone = Plan("hybrid", training.graph, *profile,
                            {.budget_bytes = budget, .backward_order = order, .threads = 1});
    ASSERT_TRUE(alone.feasible) << program::BackwardOrderName(order);
    evaluations += alone.evaluations;
    if (!fastest || alone.best.step_time_s() < fastest->best.step_time_s()) {
      fastest = std::move(alone);
    }
  }
  ASSERT_GE(schedules.size(), 2u) << "the orders should differ on a ResNet";
  EXPECT_EQ(each.backward_order, fastest->backward_order);
  EXPECT_EQ(each.best.step_time_s(), fastest->best.step_time_s());
  EXPECT_EQ(program::ProgramToText(each.best.program),
            program::ProgramToText(fastest->best.program));
  EXPECT_EQ(each.evaluations, evaluations);
  EXPECT_EQ(each.orders_planned, static_cast<int>(schedules.size()));
}

TEST(Portfolio, HybridInEveryOrderReportsTheSmallestArenaOfAnyOrderWhereNothingFits) {
  // At a budget no plan fits, the result is the smallest arena any order
  // reached, and names that plan's order.
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet50", 128);
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("h100-80g-pcie5");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  const PlanResult each =
      Plan("hybrid", training.graph, *profile, {.budget_bytes = 1, .every_backward_order = true});
  ASSERT_FALSE(each.feasible);
  std::optional<PlanResult> smallest;
  for (const program::BackwardOrder order :
       {program::BackwardOrder::kMemoryAware, program::BackwardOrder::kLookahead,
        program::BackwardOrder::kTopological}) {
    PlanResult alone =
        Plan("hybrid", training.graph, *profile, {.budget_bytes = 1, .backward_order = order});
    EXPECT_LE(each.smallest_arena_bytes, alone.smallest_arena_bytes)
        << program::BackwardOrderName(order);
    if (!smallest || alone.smallest_arena_bytes < smallest->smallest_arena_bytes) {
      smallest = std::move(alone);
    }
  }
  EXPECT_EQ(each.smallest_arena_bytes, smallest->smallest_arena_bytes);
  EXPECT_EQ(each.best.arena_bytes(), each.smallest_arena_bytes);
  EXPECT_EQ(each.backward_order, smallest->backward_order);
}

TEST(Portfolio, ThePlanAndItsCountsDoNotDependOnTheNumberOfThreads) {
  // Candidates are evaluated several at a time but recorded as if one by
  // one, and the race's refinements and recompute's starts run side by side
  // in lanes of their own: with 1, 2 and 5 threads every count and the
  // Program are the same.
  // (Small enough to run under ThreadSanitizer in CI.)
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet18", 128);
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("v100-16g-pcie3");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  const int64_t budget = BudgetBetween(training.graph, *profile, 1.0 / 3, kAutodiffOrder);
  std::vector<PlanResult> results;
  for (const int threads : {1, 2, 5}) {
    SCOPED_TRACE(fmt::format("{} threads", threads));
    results.push_back(
        Plan("hybrid", training.graph, *profile,
             {.budget_bytes = budget, .backward_order = kAutodiffOrder, .threads = threads}));
  }
  ASSERT_TRUE(results[0].feasible);
  EXPECT_GT(results[0].evaluations, 100) << "too little refinement to exercise the threads";
  // Several refinements race, side by side from two threads on.
  EXPECT_GE(results[0].race.size(), 2u);
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].evaluations, results[0].evaluations);
    EXPECT_EQ(results[i].laid_out, results[0].laid_out);
    EXPECT_EQ(results[i].repeated, results[0].repeated);
    ASSERT_EQ(results[i].race.size(), results[0].race.size());
    for (size_t r = 0; r < results[0].race.size(); ++r) {
      EXPECT_EQ(results[i].race[r].evaluations, results[0].race[r].evaluations);
      EXPECT_EQ(results[i].race[r].step_s, results[0].race[r].step_s);
    }
    EXPECT_EQ(results[i].smallest_arena_bytes, results[0].smallest_arena_bytes);
    EXPECT_EQ(program::ProgramToText(results[i].best.program),
              program::ProgramToText(results[0].best.program));
  }
}

TEST(Portfolio, HybridSeedsUnitTrialsRunAheadOnThreadsWithTheResultOfOneByOne) {
  // hybrid-seed tries its units in order, each against the plan the kept
  // ones left; with several threads the trials after the next run ahead in
  // case it is not kept, and those run past a kept one are thrown away: the
  // Program and every count are those of one thread. The workload: a small
  // GPT-2 on a PCIe link at half its `none` arena, where the link cannot
  // carry every spill and recomputing some units is faster.
  models::ModelOptions gpt;
  gpt.batch = 4;
  gpt.n_layer = 8;
  gpt.n_head = 2;
  gpt.d_model = 64;
  gpt.seq_len = 64;
  gpt.vocab = 512;
  const autodiff::TrainingGraph training = program::testing::TrainingModel("gpt2", gpt);
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("h200-141g-pcie5");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  const int64_t none_arena = Plan("none", training.graph, *profile, INT64_MAX).best.arena_bytes();
  const PlannerOptions one = {.budget_bytes = none_arena / 2, .threads = 1};
  const PlanResult swapped = Plan("swap", training.graph, *profile, one);
  std::vector<PlanResult> results;
  for (const int threads : {1, 2, 5}) {
    SCOPED_TRACE(fmt::format("{} threads", threads));
    PlannerOptions options = one;
    options.threads = threads;
    results.push_back(Plan("hybrid-seed", training.graph, *profile, options));
  }
  ASSERT_TRUE(results[0].feasible);
  // Units were tried, and some kept: a run ahead was thrown away.
  EXPECT_GT(results[0].evaluations, swapped.evaluations + 10);
  EXPECT_LT(results[0].best.step_time_s(), swapped.best.step_time_s());
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].evaluations, results[0].evaluations);
    EXPECT_EQ(results[i].laid_out, results[0].laid_out);
    EXPECT_EQ(results[i].repeated, results[0].repeated);
    EXPECT_EQ(results[i].smallest_arena_bytes, results[0].smallest_arena_bytes);
    EXPECT_EQ(program::ProgramToText(results[i].best.program),
              program::ProgramToText(results[0].best.program));
  }
}

TEST(Portfolio, TheBoundsChangeNoDecision) {
  // The live-bytes and step-time bounds only skip laying out candidates that
  // the search would reject anyway: with and without them, every policy makes
  // the same Program, and with them fewer candidates are laid out.
  const autodiff::TrainingGraph training = program::testing::TrainingModel("resnet18", 128);
  absl::StatusOr<analysis::HardwareProfile> profile =
      analysis::LoadHardwareProfile("a100-40g-pcie4");
  ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
  int laid_out_with = 0;
  int laid_out_without = 0;
  for (const int64_t budget : {BudgetBetween(training.graph, *profile, 0.25, kAutodiffOrder),
                               BudgetBetween(training.graph, *profile, 0.5, kAutodiffOrder)}) {
    for (const std::string& name : PolicyNames()) {
      SCOPED_TRACE(fmt::format("{} at {} bytes", name, budget));
      std::vector<PlanResult> results;
      for (const bool use_bounds : {true, false}) {
        results.push_back(Plan(
            name, training.graph, *profile,
            {.budget_bytes = budget, .backward_order = kAutodiffOrder, .use_bounds = use_bounds}));
      }
      EXPECT_EQ(results[0].evaluations, results[1].evaluations);
      EXPECT_EQ(results[1].laid_out, results[1].evaluations);
      EXPECT_EQ(program::ProgramToText(results[0].best.program),
                program::ProgramToText(results[1].best.program));
      laid_out_with += results[0].laid_out;
      laid_out_without += results[1].laid_out;
    }
  }
  EXPECT_LT(laid_out_with, laid_out_without) << "the bounds rejected nothing";
}

PlanResult PlanHybrid(const ir::Graph& graph, const analysis::HardwareProfile& profile,
                      PlannerOptions planner_options, HybridOptions options) {
  const analysis::RooflineCostModel cost_model(profile);
  PlanningContext context(graph, cost_model, profile, planner_options);
  HybridPolicy hybrid(options);
  absl::StatusOr<PlanResult> result = RunPolicy(hybrid, context);
  EXPECT_TRUE(result.ok()) << StatusMessage(result.status());
  if (!result.ok()) return PlanResult{};
  return *std::move(result);
}

TEST(Portfolio, ARefinementAdvancedInSlicesEndsWhereOneRunAtOnceEnds) {
  // The race stops a refinement after each slice of candidates and resumes
  // it later. With a first quota of one candidate (then 2, 4, ...) every
  // refinement is stopped and resumed many times, often in the middle of a
  // list of moves. Every refinement that runs to its end in the race must
  // end exactly where the same start's refinement ends without a race:
  // the same step time after the same number of candidates. (An infinite
  // credit keeps every refinement in the race until its end; one pass makes
  // the path itself count.) And a race must save candidates, or it prunes
  // nothing: on these small graphs every refinement ends within the default
  // first quota (100 candidates), so the check races with slices of 10.
  int compared = 0;
  int saved = 0;
  for (const auto& [model, image] :
       {std::pair<std::string, int64_t>{"resnet50", 128}, {"unet", 128}, {"deeplabv3plus", 128}}) {
    const autodiff::TrainingGraph training = program::testing::TrainingModel(model, image);
    for (const std::string preset : {"v100-16g-nvlink2", "v100-16g-pcie3"}) {
      absl::StatusOr<analysis::HardwareProfile> profile = analysis::LoadHardwareProfile(preset);
      ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
      const int64_t budget = BudgetBetween(training.graph, *profile, 1.0 / 3, kAutodiffOrder);
      SCOPED_TRACE(fmt::format("{} on {} at {} bytes", model, preset, budget));
      const PlannerOptions one_pass{
          .budget_bytes = budget, .backward_order = kAutodiffOrder, .max_refine_passes = 1};
      const PlanResult at_once =
          PlanHybrid(training.graph, *profile, one_pass, {.race_first_quota = 0});
      const PlanResult sliced = PlanHybrid(
          training.graph, *profile, one_pass,
          {.race_first_quota = 1, .race_gain_credit = std::numeric_limits<double>::infinity()});
      const PlanResult raced =
          PlanHybrid(training.graph, *profile, one_pass, {.race_first_quota = 10});
      ASSERT_TRUE(at_once.feasible);
      ASSERT_EQ(sliced.race.size(), at_once.race.size());
      for (size_t i = 0; i < sliced.race.size(); ++i) {
        const PlanResult::Refinement& alone = at_once.race[i];
        const PlanResult::Refinement& resumed = sliced.race[i];
        EXPECT_TRUE(alone.finished);
        ASSERT_EQ(resumed.start, alone.start);
        EXPECT_EQ(resumed.start_step_s, alone.start_step_s);
        EXPECT_TRUE(resumed.finished);
        ++compared;
        EXPECT_EQ(resumed.step_s, alone.step_s) << resumed.start;
        EXPECT_EQ(resumed.evaluations, alone.evaluations) << resumed.start;
      }
      if (raced.evaluations < at_once.evaluations) ++saved;
      EXPECT_LE(raced.evaluations, at_once.evaluations);
    }
  }
  EXPECT_GE(compared, 12) << "too few refinements ran to their end in slices";
  EXPECT_GT(saved, 0) << "the race never saved a candidate";
}

// The kick tests' workloads: a small ResNet-50 and U-Net at budgets where
// the kick finds a faster plan (the first three) and where it does not.
struct KickCase {
  std::string model;
  std::string preset;
  double budget_fraction;  // of the way from hybrid's floor to none's arena
};
std::vector<KickCase> KickCases() {
  return {{"resnet50", "v100-16g-nvlink2", 0.1},
          {"unet", "v100-16g-pcie3", 0.2},
          {"unet", "h200-141g-pcie5", 0.2},
          {"unet", "h200-141g-pcie5", 0.5}};
}

// Calls `check(graph, profile, options)` for each of KickCases, the model at
// 128x128 in autodiff's backward order, under a trace that names it.
template <typename Check>
void ForEachKickCase(Check check) {
  for (const KickCase& c : KickCases()) {
    const autodiff::TrainingGraph training = program::testing::TrainingModel(c.model, 128);
    const analysis::HardwareProfile profile = *analysis::LoadHardwareProfile(c.preset);
    const int64_t budget =
        BudgetBetween(training.graph, profile, c.budget_fraction, kAutodiffOrder);
    SCOPED_TRACE(fmt::format("{} on {} at {} bytes", c.model, c.preset, budget));
    check(training.graph, profile,
          PlannerOptions{.budget_bytes = budget, .backward_order = kAutodiffOrder});
  }
}

// `after` is `before` planned with one more refinement, last in its race,
// from `before`'s best plan tightened (its start named `before.start` and
// `suffix`): the race before it is the same, it starts slower than that
// plan, and its plan is the result only if it is faster. Returns whether it
// was.
bool ExpectOneMoreRefinementKeptOnlyIfFaster(const PlanResult& before, const PlanResult& after,
                                             std::string_view suffix) {
  EXPECT_EQ(after.race.size(), before.race.size() + 1);
  if (after.race.size() != before.race.size() + 1) return false;
  for (size_t i = 0; i < before.race.size(); ++i) {
    EXPECT_EQ(after.race[i].start, before.race[i].start);
    EXPECT_EQ(after.race[i].step_s, before.race[i].step_s);
  }
  const PlanResult::Refinement& last = after.race.back();
  EXPECT_EQ(last.start, before.start + std::string(suffix));
  EXPECT_GT(last.start_step_s, before.best.step_time_s());
  EXPECT_LE(after.best.step_time_s(), before.best.step_time_s());
  if (after.best.step_time_s() < before.best.step_time_s()) {
    EXPECT_EQ(after.start, last.start);
    EXPECT_EQ(after.best.step_time_s(), last.step_s);
    return true;
  }
  EXPECT_EQ(after.start, before.start);
  EXPECT_EQ(program::ProgramToText(after.best.program),
            program::ProgramToText(before.best.program));
  return false;
}

TEST(HybridKick, TheBestPlanTightenedAndRefinedAgainIsKeptOnlyIfFaster) {
  // The refinement ends in a local optimum; the kick tightens the best plan
  // (evicts to 90% of the budget) and refines it again. Without a kick the
  // race's refinements and their plans are the same; with one the kick's
  // refinement comes last in `race`, starts from the tightened plan (slower
  // than the best, which it was tightened from) and its plan is the result
  // only if it is faster.
  int improved = 0;
  ForEachKickCase([&](const ir::Graph& graph, const analysis::HardwareProfile& profile,
                      const PlannerOptions& options) {
    const PlanResult none = PlanHybrid(graph, profile, options, {.kicks = 0});
    const PlanResult one = PlanHybrid(graph, profile, options, {.kicks = 1, .gentle_kick = false});
    ASSERT_TRUE(none.feasible);
    ASSERT_TRUE(one.feasible);
    if (ExpectOneMoreRefinementKeptOnlyIfFaster(none, one, ", tightened")) ++improved;
  });
  EXPECT_EQ(improved, 3) << "the kick's gains changed: these cases no longer show both outcomes";
}

TEST(HybridKick, AGentleKickFollowsOnlyWhereTheKickGainedNothingAndIsKeptOnlyIfFaster) {
  // Where the kick made the best plan faster, nothing follows it: the plan
  // is the same with and without the gentle kick. Where it did not, the
  // gentle kick comes last in `race`, from the same best plan, and its plan
  // is the result only if it is faster. The kick's cases, and U-Net at
  // 256x256, batch 4, on the H200 with 968 MiB, where it gains (from
  // bench/plan_compare.py's grid).
  int followed = 0;
  int improved = 0;
  auto check = [&](const ir::Graph& graph, const analysis::HardwareProfile& profile,
                   const PlannerOptions& options) {
    const PlanResult kick = PlanHybrid(graph, profile, options, {.gentle_kick = false});
    const PlanResult both = PlanHybrid(graph, profile, options, {.gentle_kick = true});
    ASSERT_TRUE(kick.feasible);
    ASSERT_TRUE(both.feasible);
    if (kick.start.ends_with(", tightened")) {  // the kick gained
      EXPECT_EQ(both.race.size(), kick.race.size());
      EXPECT_EQ(program::ProgramToText(both.best.program),
                program::ProgramToText(kick.best.program));
      return;
    }
    ++followed;
    if (ExpectOneMoreRefinementKeptOnlyIfFaster(kick, both, ", tightened gently")) ++improved;
  };
  ForEachKickCase(check);
  {
    SCOPED_TRACE("unet, 256x256, batch 4, on h200-141g-pcie5 at 1014795648 bytes");
    models::ModelOptions options;
    options.batch = 4;
    options.height = options.width = 256;
    const autodiff::TrainingGraph unet = program::testing::TrainingModel("unet", options);
    check(unet.graph, *analysis::LoadHardwareProfile("h200-141g-pcie5"),
          {.budget_bytes = 1014795648, .backward_order = kAutodiffOrder});
  }
  EXPECT_GT(followed, improved) << "these cases no longer show a gentle kick that gains nothing";
  EXPECT_GT(improved, 0) << "these cases no longer show a gentle kick that gains";
}

TEST(HybridExchange, KeepingATensorByRebuildingAnotherFindsFasterPlans) {
  // Exchanges are tried only where no single decision improves the plan, so
  // without them each refinement ends where these plans would have ended.
  // At tight budgets, where a tensor comes back only if another makes room,
  // they must find faster plans, and more often than the changed path of
  // the search ends slower.
  const autodiff::TrainingGraph training =
      program::testing::TrainingModel("deeplabv3plus", 512, /*seq_len=*/16, /*batch=*/4);
  int faster = 0;
  int slower = 0;
  // A slow link for a fast device: most of the overhead is recomputation.
  for (const std::string preset : {"h200-141g-pcie5"}) {
    absl::StatusOr<analysis::HardwareProfile> profile = analysis::LoadHardwareProfile(preset);
    ASSERT_TRUE(profile.ok()) << StatusMessage(profile.status());
    const int64_t none_arena =
        Plan("none", training.graph, *profile, {.budget_bytes = INT64_MAX}).best.arena_bytes();
    const int64_t floor =
        Plan("hybrid", training.graph, *profile, {.budget_bytes = 1}).smallest_arena_bytes;
    for (const double fraction : {0.1, 0.25}) {
      const auto budget =
          floor + static_cast<int64_t>(fraction * static_cast<double>(none_arena - floor));
      SCOPED_TRACE(fmt::format("{} at {} bytes", preset, budget));
      const PlanResult without =
          PlanHybrid(training.graph, *profile, {.budget_bytes = budget}, {.exchange_partners = 0});
      const PlanResult with = PlanHybrid(training.graph, *profile, {.budget_bytes = budget}, {});
      ASSERT_TRUE(without.feasible);
      ASSERT_TRUE(with.feasible);
      faster += with.best.step_time_s() < without.best.step_time_s() ? 1 : 0;
      slower += with.best.step_time_s() > without.best.step_time_s() ? 1 : 0;
    }
  }
  EXPECT_GT(faster, slower) << faster << " faster, " << slower << " slower";
}

INSTANTIATE_TEST_SUITE_P(SmallModels, Portfolio,
                         ::testing::Values(Workload{"resnet18", 32}, Workload{"resnet50", 32},
                                           Workload{"vgg16", 224}, Workload{"deeplabv3plus", 32},
                                           Workload{"unet", 32}, Workload{"gpt2", 32}),
                         [](const ::testing::TestParamInfo<Workload>& workload) {
                           return workload.param.model;
                         });

}  // namespace
}  // namespace spillway::planner
