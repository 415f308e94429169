// The session library: workloads from a spec, planning sessions, their
// observers and their JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "session/forward.h"
#include "session/planning.h"
#include "session/sweep.h"
#include "session/training.h"
#include "session/workload.h"
#include "support/units.h"

namespace spillway::session {
namespace {

using ::testing::HasSubstr;

#define SESSION_CONCAT_INNER(a, b) a##b
#define SESSION_CONCAT(a, b) SESSION_CONCAT_INNER(a, b)
// Declares `lhs` from a StatusOr that must hold a value (the test stops with
// its message otherwise).
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                           \
  auto SESSION_CONCAT(status_or_, __LINE__) = (expr);             \
  ASSERT_TRUE(SESSION_CONCAT(status_or_, __LINE__).ok())          \
      << SESSION_CONCAT(status_or_, __LINE__).status().message(); \
  lhs = *std::move(SESSION_CONCAT(status_or_, __LINE__))

PlanningRequest SmallResNet(std::string budget = "") {
  PlanningRequest request;
  request.workload.model = "resnet18";
  request.workload.image = 32;
  request.workload.given.push_back({"height", "--image"});
  request.hardware = "v100-16g-nvlink2";
  request.budget = std::move(budget);
  return request;
}

// Records what a session tells its observer.
class Recorder final : public PlanningObserver {
 public:
  void Begin(const std::string& label) override { events.push_back("begin " + label); }
  void Progress(int candidates) override { last_candidates = candidates; }
  void End() override { events.push_back("end"); }
  bool Interrupted() override { return interrupt_after >= 0 && last_candidates >= interrupt_after; }

  std::vector<std::string> events;
  int last_candidates = 0;
  int interrupt_after = -1;
};

TEST(Workload, BuildsABuiltInModelAndRefusesAnOptionItDoesNotRead) {
  WorkloadSpec spec;
  spec.model = "resnet18";
  spec.image = 32;
  ASSERT_OK_AND_ASSIGN(const Workload workload, BuildWorkload(spec));
  EXPECT_GT(workload.graph.num_nodes(), 0);
  EXPECT_EQ(DescribeWorkload(spec), "resnet18, batch 1, 32x32");
  spec.given.push_back({"n_layer", "--layers"});
  EXPECT_THAT(BuildWorkload(spec).status().message(),
              HasSubstr("--layers does not apply to resnet18"));
}

TEST(Workload, NeedsExactlyOneSource) {
  WorkloadSpec spec;
  EXPECT_EQ(BuildWorkload(spec).status().message(), "give exactly one of --model and --onnx");
  spec.graph = "g.json";
  EXPECT_THAT(BuildWorkload(spec).status().message(), HasSubstr("not to run"));
}

TEST(PlanningSession, PlansAndDescribesItsWorkload) {
  Recorder recorder;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PlanningSession> session,
                       PlanningSession::Create(SmallResNet("60MiB"), &recorder));
  EXPECT_EQ(session->budget_bytes(), int64_t{60} << 20);
  EXPECT_EQ(session->Describe(),
            "resnet18, batch 1, 32x32 (sgd) on v100-16g-nvlink2, budget 60.0 MiB");
  ASSERT_OK_AND_ASSIGN(const planner::PlanResult none, session->Run("none"));
  ASSERT_OK_AND_ASSIGN(const planner::PlanResult hybrid, session->Run("hybrid", "hybrid (1/1)"));
  EXPECT_EQ(recorder.events,
            (std::vector<std::string>{"begin none", "end", "begin hybrid (1/1)", "end"}));
  EXPECT_EQ(recorder.last_candidates, hybrid.evaluations);
  const nlohmann::json json = PlanResultToJson(hybrid, none, nullptr, session->budget_bytes());
  EXPECT_EQ(json["policy"], "hybrid");
  EXPECT_EQ(json["feasible"], hybrid.feasible);
  EXPECT_EQ(json["budget_bytes"], session->budget_bytes());
  EXPECT_DOUBLE_EQ(json["step_time_s"].get<double>(), hybrid.best.step_time_s());
  EXPECT_DOUBLE_EQ(json["overhead"].get<double>(),
                   hybrid.best.step_time_s() / none.best.step_time_s() - 1.0);
}

// A narrow ResNet-18 at 224x224, batch 16, on the H200's PCIe link: its
// activations outweigh its parameters, so plans fit from about 55% of the
// `none` arena, and the policies have work to do up to it.
PlanningRequest SweptResNet() {
  PlanningRequest request;
  request.workload.model = "resnet18";
  request.workload.image = 224;
  request.workload.batch = 16;
  request.workload.options.base_width = 16;
  request.workload.given.push_back({"height", "--image"});
  request.workload.given.push_back({"batch", "--batch"});
  request.workload.given.push_back({"base_width", "--base-width"});
  request.hardware = "h200-141g-pcie5";
  return request;
}

TEST(Sweep, HybridsStepNeverRisesWithTheBudget) {
  Recorder recorder;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PlanningSession> session,
                       PlanningSession::Create(SweptResNet(), &recorder));
  ASSERT_OK_AND_ASSIGN(const planner::PlanResult none, session->Run("none"));
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> budgets,
                       SpacedBudgets(none.best.arena_bytes(), 0.3, 1.0, 8));
  ASSERT_EQ(budgets.size(), 8u);
  std::reverse(budgets.begin(), budgets.end());  // planned smallest first all the same
  const int64_t budget_before = session->budget_bytes();
  ASSERT_OK_AND_ASSIGN(const Sweep sweep, RunSweep(*session, "hybrid", budgets));
  ASSERT_EQ(sweep.points.size(), 8u);
  EXPECT_EQ(session->budget_bytes(), budget_before);
  EXPECT_EQ(sweep.none.best.step_time_s(), none.best.step_time_s());
  EXPECT_EQ(recorder.events.back(), "end");
  EXPECT_THAT(recorder.events, ::testing::Contains(fmt::format("begin hybrid at {} (8/8)",
                                                               FormatBytes(budgets.front()))));
  const SweepPoint* feasible_below = nullptr;
  int feasible = 0;
  for (const SweepPoint& point : sweep.points) {
    SCOPED_TRACE(point.budget_bytes);
    const planner::PlanResult& result = point.result;
    if (feasible_below != nullptr) {
      EXPECT_GT(point.budget_bytes, feasible_below->budget_bytes);
      EXPECT_TRUE(result.feasible) << "a smaller budget had a plan";
      EXPECT_LE(result.best.step_time_s(), feasible_below->result.best.step_time_s());
    }
    if (!result.feasible) continue;
    EXPECT_LE(result.best.arena_bytes(), point.budget_bytes);
    if (point.carried_from_bytes >= 0) {
      // Made at a smaller budget, and laid out there.
      EXPECT_LT(point.carried_from_bytes, point.budget_bytes);
      EXPECT_LE(result.best.arena_bytes(), point.carried_from_bytes);
    }
    feasible_below = &point;
    ++feasible;
  }
  EXPECT_GE(feasible, 4) << "too few budgets fit to show the sweep's order";
  EXPECT_EQ(sweep.points.back().budget_bytes, none.best.arena_bytes());
  EXPECT_EQ(sweep.points.back().result.best.step_time_s(), none.best.step_time_s());

  const nlohmann::json json = SweepToJson(*session, sweep);
  EXPECT_EQ(json["policy"], "hybrid");
  EXPECT_EQ(json["none_arena_bytes"], none.best.arena_bytes());
  ASSERT_EQ(json["points"].size(), 8u);
  EXPECT_EQ(json["points"][7]["budget_bytes"], none.best.arena_bytes());
  EXPECT_DOUBLE_EQ(json["points"][7]["share_of_none_arena"].get<double>(), 1.0);
  EXPECT_EQ(json["workload"], "resnet18, batch 16, 224x224 (sgd) on h200-141g-pcie5");
}

TEST(Sweep, OtherPoliciesArePlannedAtEachBudgetAsPlanWouldPlanThem) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PlanningSession> session,
                       PlanningSession::Create(SweptResNet()));
  ASSERT_OK_AND_ASSIGN(const planner::PlanResult none, session->Run("none"));
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> budgets,
                       SpacedBudgets(none.best.arena_bytes(), 0.5, 0.9, 3));
  ASSERT_OK_AND_ASSIGN(const Sweep sweep, RunSweep(*session, "swap", budgets));
  ASSERT_EQ(sweep.points.size(), budgets.size());
  for (size_t i = 0; i < budgets.size(); ++i) {
    PlanningRequest alone = SweptResNet();
    alone.budget = std::to_string(budgets[i]);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PlanningSession> single, PlanningSession::Create(alone));
    ASSERT_OK_AND_ASSIGN(const planner::PlanResult swap, single->Run("swap"));
    EXPECT_EQ(sweep.points[i].budget_bytes, budgets[i]);
    EXPECT_EQ(sweep.points[i].carried_from_bytes, -1);
    EXPECT_EQ(sweep.points[i].result.feasible, swap.feasible);
    EXPECT_EQ(sweep.points[i].result.best.step_time_s(), swap.best.step_time_s());
    EXPECT_EQ(sweep.points[i].result.best.arena_bytes(), swap.best.arena_bytes());
  }
}

TEST(Sweep, RefusesBudgetsItCannotPlan) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PlanningSession> session,
                       PlanningSession::Create(SweptResNet()));
  EXPECT_EQ(RunSweep(*session, "hybrid", {}).status().message(),
            "a sweep needs at least one budget");
  EXPECT_EQ(RunSweep(*session, "hybrid", {1024, 0}).status().message(),
            "a budget must be at least 1 byte, not 0");
  EXPECT_EQ(RunSweep(*session, "hybrid", {2048, 1024, 2048}).status().message(),
            "the sweep has the budget 2.00 KiB twice");
  EXPECT_THAT(RunSweep(*session, "greedy", {1024}).status().message(), HasSubstr("greedy"));
  EXPECT_THAT(SpacedBudgets(1000, 0.5, 0.4, 3).status().message(), HasSubstr("0 < from <= to"));
  EXPECT_THAT(SpacedBudgets(1000, 0, 0.4, 3).status().message(), HasSubstr("0 < from <= to"));
  EXPECT_THAT(SpacedBudgets(1000, 0.5, 1.5, 3).status().message(), HasSubstr("0 < from <= to"));
  EXPECT_THAT(SpacedBudgets(1000, 0.4, 0.5, 1).status().message(), HasSubstr("at least 2"));
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> one, SpacedBudgets(1000, 0.5, 0.5, 1));
  EXPECT_EQ(one, std::vector<int64_t>{500});
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> spaced, SpacedBudgets(1000, 0.2, 1.0, 5));
  EXPECT_EQ(spaced, (std::vector<int64_t>{200, 400, 600, 800, 1000}));
  // Shares closer than a byte: each budget once.
  ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> tiny, SpacedBudgets(3, 0.5, 1.0, 5));
  EXPECT_EQ(tiny, (std::vector<int64_t>{1, 2, 3}));
}

TEST(PlanningSession, AnInterruptedPolicyFailsAsCancelled) {
  for (const int threads : {1, 2, 4}) {
    SCOPED_TRACE(threads);
    Recorder recorder;
    recorder.interrupt_after = 3;
    PlanningRequest request = SmallResNet("40MiB");
    request.planner.threads = threads;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PlanningSession> session,
                         PlanningSession::Create(request, &recorder));
    const absl::StatusOr<planner::PlanResult> result = session->Run("hybrid");
    EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
    // On one thread it stops at once; each other line of search running
    // beside it stops at its next candidate.
    EXPECT_GE(recorder.last_candidates, 3);
    EXPECT_LE(recorder.last_candidates, 3 + (threads - 1));
    EXPECT_EQ(recorder.events.back(), "end");  // the observer's line is cleared
  }
}

TEST(PlanningSession, RefusesABadRequestInOneLine) {
  PlanningRequest request = SmallResNet();
  request.hardware = "no-such-gpu";
  EXPECT_THAT(PlanningSession::Create(request).status().message(), HasSubstr("no-such-gpu"));
  request = SmallResNet("lots");
  EXPECT_THAT(PlanningSession::Create(request).status().message(), HasSubstr("lots"));
  request = SmallResNet();
  request.optimizer = "lion";
  EXPECT_EQ(PlanningSession::Create(request).status().message(),
            "--optimizer 'lion': sgd or adamw");
  request = SmallResNet();
  request.workload.onnx = "model.onnx";
  EXPECT_EQ(PlanningSession::Create(request).status().message(),
            "give exactly one of --model, --onnx and --graph");
}

TEST(Compare, RunsEveryHeuristicAndSkipsThoseThatSpillWithoutALink) {
  PlanningRequest request = SmallResNet("50MiB");
  request.host_link = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PlanningSession> session, PlanningSession::Create(request));
  ASSERT_OK_AND_ASSIGN(const Comparison comparison, Compare(*session, {}));
  std::vector<std::string> run;
  for (const planner::PlanResult& result : comparison.results) run.push_back(result.policy);
  EXPECT_EQ(run, (std::vector<std::string>{"none", "recompute"}));
  EXPECT_THAT(comparison.not_run, ::testing::Contains("swap"));
  EXPECT_THAT(comparison.not_run, ::testing::Contains("hybrid"));
  EXPECT_EQ(comparison.Find("swap"), nullptr);
  const nlohmann::json json = ComparisonToJson(comparison, session->budget_bytes());
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[1]["policy"], "recompute");
  EXPECT_FALSE(json[1].contains("speedup_over_swap"));
}

TEST(Training, TheTrainerOptionsHaveTheDocumentedDefaults) {
  TrainingRequest request;
  request.workload.model = "resnet18";
  request.workload.options.seed = 7;
  ASSERT_OK_AND_ASSIGN(const train::TrainerOptions sgd, MakeTrainerOptions(request));
  EXPECT_EQ(sgd.optimizer.kind, autodiff::OptimizerKind::kSgd);
  EXPECT_DOUBLE_EQ(sgd.optimizer.lr, kDefaultSgdLr);
  EXPECT_DOUBLE_EQ(sgd.optimizer.momentum, 0.9);
  EXPECT_EQ(sgd.hardware.name, "cpu");
  EXPECT_EQ(sgd.budget_bytes, sgd.hardware.default_budget_bytes());
  EXPECT_EQ(sgd.data.seed, 7u);
  EXPECT_EQ(DescribeOptimizer(sgd.optimizer), "sgd, lr 0.01, momentum 0.9");
  request.optimizer = "adamw";
  request.weight_decay = 0.05;
  ASSERT_OK_AND_ASSIGN(const train::TrainerOptions adamw, MakeTrainerOptions(request));
  EXPECT_TRUE(adamw.optimizer.decoupled);
  EXPECT_DOUBLE_EQ(adamw.optimizer.lr, kDefaultAdamLr);
  EXPECT_EQ(DescribeOptimizer(adamw.optimizer), "adamw, lr 0.001, weight decay 0.05");
  request.optimizer = "lion";
  EXPECT_EQ(MakeTrainerOptions(request).status().message(), "--optimizer 'lion': sgd or adamw");
  request.optimizer = "sgd";
  EXPECT_EQ(sgd.math_mode, analysis::MathMode::kFp32);
  request.math_mode = "tf32";
  ASSERT_OK_AND_ASSIGN(const train::TrainerOptions tf32, MakeTrainerOptions(request));
  EXPECT_EQ(tf32.math_mode, analysis::MathMode::kTf32);
  request.math_mode = "bf17";
  EXPECT_EQ(MakeTrainerOptions(request).status().message(),
            "--math-mode 'bf17': fp32, tf32 or fp16");
}

// The host backends compute in fp32 only, and no backend runs fp16: each a
// one-line error naming the mode. Determinism and the mode are described.
TEST(Training, ABackendRefusesAMathModeItDoesNotRun) {
  for (const char* backend : {"cpu", "reference"}) {
    const absl::StatusOr<std::unique_ptr<backends::Backend>> tf32 =
        MakeBackend({.backend = backend, .threads = 1, .math_mode = "tf32"});
    EXPECT_EQ(tf32.status().code(), absl::StatusCode::kInvalidArgument) << backend;
    EXPECT_THAT(tf32.status().message(), HasSubstr("computes in fp32 only")) << backend;
  }
  const absl::StatusOr<std::unique_ptr<backends::Backend>> fp16 =
      MakeBackend({.backend = "cpu", .threads = 1, .math_mode = "fp16"});
  EXPECT_THAT(fp16.status().message(), HasSubstr("no backend runs fp16 kernels yet"));
  EXPECT_TRUE(MakeBackend({.backend = "cpu", .threads = 1, .deterministic = false}).ok());
  EXPECT_EQ(DescribeBackend({.backend = "reference", .math_mode = "tf32", .deterministic = false}),
            "reference, tf32, nondeterministic");
  const nlohmann::ordered_json json = BackendToJson({.backend = "reference"});
  EXPECT_EQ(json["math_mode"], "fp32");
  EXPECT_EQ(json["deterministic"], true);
}

TEST(Training, ACostsFileFromAnotherConfigurationIsNamed) {
  analysis::MeasuredCosts costs;
  costs.measured_on.backend = "cpu";
  costs.measured_on.threads = 4;
  costs.measured_on.isa = DirectKernelPath({.backend = "cpu", .threads = 4});
  EXPECT_EQ(CostsMismatch(costs, "c.json", {.backend = "cpu", .threads = 4}), std::nullopt);
  const std::optional<std::string> warning =
      CostsMismatch(costs, "c.json", {.backend = "cpu", .threads = 2});
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("c.json was measured on the cpu backend with 4 threads"));
  // Times of one math mode do not stand for another's.
  const std::optional<std::string> other_math =
      CostsMismatch(costs, "c.json", {.backend = "cpu", .threads = 4, .math_mode = "tf32"});
  ASSERT_TRUE(other_math.has_value());
  EXPECT_THAT(*other_math, HasSubstr("in fp32; this run uses cpu"));
  EXPECT_THAT(*other_math, HasSubstr("in tf32"));
  EXPECT_THAT(*warning, HasSubstr("this run uses cpu with 2 threads"));
}

TEST(Forward, InputsComeFromTheSeedUnlessGivenAndAreNamedInErrors) {
  WorkloadSpec spec;
  spec.model = "resnet18";
  spec.image = 32;
  ASSERT_OK_AND_ASSIGN(const Workload workload, BuildWorkload(spec));
  ASSERT_OK_AND_ASSIGN(const auto first, GatherInputs(workload.graph, {}, 3));
  ASSERT_OK_AND_ASSIGN(const auto again, GatherInputs(workload.graph, {}, 3));
  ASSERT_OK_AND_ASSIGN(const auto other, GatherInputs(workload.graph, {}, 4));
  ASSERT_EQ(first.size(), 2u);  // images and labels
  for (const auto& [name, input] : first) {
    EXPECT_EQ(input.source, "seed 3");
    EXPECT_EQ(input.bytes, again.at(name).bytes) << name;
    EXPECT_EQ(input.bytes.size(),
              workload.graph.value(*workload.graph.FindValue(name)).type.bytes());
  }
  EXPECT_NE(first.at("images").bytes, other.at("images").bytes);
  EXPECT_THAT(GatherInputs(workload.graph, {"pixels=x.npy"}, 3).status().message(),
              HasSubstr("the model has no input 'pixels'; its inputs are"));
  EXPECT_EQ(GatherInputs(workload.graph, {"images"}, 3).status().message(),
            "--input 'images': expected NAME=FILE.npy");
}

}  // namespace
}  // namespace spillway::session
