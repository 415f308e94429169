// A planning session: one workload costed on one hardware profile under one
// budget, ready to run policies on. It owns everything the planner refers to
// (the training graph, the profile, the cost model and the planning context),
// so a caller keeps one object alive, not five in the right order. `spillway
// plan` and `compare` and the Python module's plan() and compare() are thin
// layers over it; the result's JSON form is theirs too.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "nlohmann/json.hpp"
#include "planner/planner.h"
#include "planner/policies.h"
#include "session/workload.h"

namespace spillway::session {

struct PlanningRequest {
  WorkloadSpec workload;
  std::string optimizer = "sgd";  // sgd or adamw: the state the step holds
  // A preset name (analysis::HardwarePresetNames) or a JSON profile's path.
  std::string hardware = "v100-16g-nvlink2";
  // Bytes ("16GiB", "17179869184") or a share of the profile's memory
  // ("60%"); empty: the profile's memory less its reserve.
  std::string budget;
  std::string math_mode = "fp32";  // fp32, tf32 or fp16
  // How the hybrid planner searches (its budget and host link are set from
  // this request).
  planner::PlannerOptions planner;
  bool host_link = true;  // false: plan with recomputation only
  std::string costs;      // a costs file of measured times (spillway profile), or empty
};

// What a session reports while it works. The CLI draws one line on a
// terminal; the Python module prints a line and watches for Ctrl-C.
class PlanningObserver {
 public:
  virtual ~PlanningObserver() = default;
  // A policy (or a solver) starts: "hybrid", "swap (2/6)".
  virtual void Begin(const std::string& /*label*/) {}
  // Candidate plans considered since Begin.
  virtual void Progress(int /*candidates*/) {}
  virtual void End() {}
  // A remark for the log (the costs file used): one line, no newline.
  virtual void Note(const std::string& /*line*/) {}
  // Polled after every candidate plan: true stops the policy, which then
  // fails with absl::CancelledError.
  virtual bool Interrupted() { return false; }
};

class PlanningSession {
 public:
  // Builds the workload, its training graph and the cost model, and loads the
  // profile and the budget. One-line errors for a bad workload, profile,
  // budget or costs file. The observer, if any, must outlive the session.
  static absl::StatusOr<std::unique_ptr<PlanningSession>> Create(
      const PlanningRequest& request, PlanningObserver* observer = nullptr);
  PlanningSession(const PlanningSession&) = delete;
  PlanningSession& operator=(const PlanningSession&) = delete;

  // Runs a policy from the registry with its default options, or one the
  // caller made (`optimal` with its options). `label` is what the observer
  // shows (default: the policy's name).
  absl::StatusOr<planner::PlanResult> Run(std::string_view policy, std::string label = "");
  absl::StatusOr<planner::PlanResult> Run(planner::Policy& policy, std::string label = "");
  // The exact policy with these options (the observer sees its solver start).
  absl::StatusOr<planner::PlanResult> RunOptimal(planner::OptimalOptions options,
                                                 std::string label = "optimal");
  // A lower bound on the step of every plan that fits (an LP; any size).
  // Refused with --backward-order each (CheckOneOrder).
  absl::StatusOr<planner::PlanResult::Bound> ProveBound();
  // An error naming `what` (a bound) if hybrid plans in every backward order:
  // a bound covers the plans of the context's order only.
  absl::Status CheckOneOrder(std::string_view what) const;

  // Plans from now on for another budget (bytes, at least 1): the same
  // workload, profile and cost model, a new planning context.
  absl::Status SetBudget(int64_t budget_bytes);

  const PlanningRequest& request() const { return request_; }
  const analysis::HardwareProfile& profile() const { return profile_; }
  int64_t budget_bytes() const { return budget_bytes_; }
  const autodiff::TrainingGraph& training() const { return training_; }
  const planner::PlanningContext& context() const { return *context_; }
  // "resnet50, batch 1, 8000x8000 (sgd) on v100-16g-nvlink2, budget 15.3 GiB";
  // without the budget, where several are planned.
  std::string Describe(bool with_budget = true) const;

 private:
  PlanningSession(PlanningRequest request, PlanningObserver* observer);
  void MakeContext();  // for budget_bytes_
  absl::Status BuildModelStep();
  absl::Status BuildGraphFileStep();
  absl::Status UseCostsFile();
  void Begin(std::string label);
  void End();

  PlanningRequest request_;
  PlanningObserver* observer_;
  autodiff::TrainingGraph training_;
  analysis::HardwareProfile profile_;
  int64_t budget_bytes_ = 0;
  std::unique_ptr<analysis::CostModel> cost_model_;
  std::unique_ptr<planner::PlanningContext> context_;
  int evaluations_at_begin_ = 0;
};

// Every policy side by side: the heuristics in the registry's order (those
// that spill are skipped without a host link, and named in `not_run`), then
// optionally the exact policy; a bound every row is measured against when
// asked for (optimal's, or an LP's).
struct CompareOptions {
  bool optimal = false;  // also run the exact policy
  planner::OptimalOptions optimal_options;
  bool bound = false;  // prove an LP bound (when optimal is not run)
};
struct Comparison {
  std::vector<planner::PlanResult> results;  // results[0] is none's
  std::vector<std::string> not_run;          // policies that need a host link, without one
  std::optional<planner::PlanResult::Bound> bound;
  const planner::PlanResult& none() const { return results.front(); }
  const planner::PlanResult* Find(std::string_view policy) const;
};
absl::StatusOr<Comparison> Compare(PlanningSession& session, const CompareOptions& options);

// One plan as `spillway plan --json` prints it (bytes, seconds, FLOPs); `none`
// is the unconstrained plan its overhead is measured against, `swap` (if
// given and feasible) the plan its speedup is.
nlohmann::json PlanResultToJson(const planner::PlanResult& result, const planner::PlanResult& none,
                                const planner::PlanResult* swap, int64_t budget_bytes);
// Every row as `spillway compare --json` prints it.
nlohmann::json ComparisonToJson(const Comparison& comparison, int64_t budget_bytes);

}  // namespace spillway::session
