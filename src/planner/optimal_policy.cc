// optimal: the integer program of StepRelaxation, solved by CBC from hybrid's
// plan. docs/planner.md has the model and why its bound holds.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "planner/linear_program.h"
#include "planner/policies.h"
#include "planner/step_relaxation.h"
#include "support/status_macros.h"

namespace spillway::planner {
namespace {

// A point that a plan maps to is feasible by the relaxation's argument; one
// that is not means the model and the rewriter or simulator disagree, and the
// bound would not hold: an internal error, never a silent wrong bound.
constexpr double kPointTolerance = 1e-6;  // relative (StepRelaxation::RelativeViolation)

}  // namespace

absl::StatusOr<PlanResult> OptimalPolicy::Run(PlanningContext& context) {
  // The size limits first: a graph too large is refused the same way with or
  // without a solver.
  ASSIGN_OR_RETURN(const StepRelaxation relaxation, StepRelaxation::Build(context));
  if (!HaveMilpSolver()) {
    return absl::FailedPreconditionError(
        "the optimal policy needs CBC, which this build was configured without: install "
        "coinor-libcbc-dev (scripts/install-deps.sh) and configure again");
  }
  const LinearProgram& program = relaxation.program();
  if (!options_.model_path.empty()) RETURN_IF_ERROR(WriteMilp(program, options_.model_path));

  std::optional<Evaluation> hybrid;  // the start's plan: hybrid's, or recompute's without a link
  std::string start_name = "hybrid";
  SolverOptions solver;
  solver.time_limit_s = options_.solver_time_limit_s;
  if (options_.start_from_hybrid) {
    // Without a host link hybrid cannot run; recompute's plan is the start.
    HybridPolicy hybrid_policy(HybridOptions{.other_orders = false});
    RecomputePolicy recompute_policy;
    Policy& policy = context.options().host_link ? static_cast<Policy&>(hybrid_policy)
                                                 : static_cast<Policy&>(recompute_policy);
    if (!context.options().host_link) start_name = "recompute";
    ASSIGN_OR_RETURN(PlanResult result, policy.Run(context));
    // A plan that fetches a tensor twice is not a point of the program (it
    // is absent between two readers): it is neither a start nor a result.
    if (context.Fits(result.best) && BoundCovers(result.best.plan)) {
      std::vector<double> start = relaxation.PointOf(result.best);
      std::string worst;
      const double violation = relaxation.RelativeViolation(start, &worst);
      if (violation > kPointTolerance) {
        return absl::InternalError(fmt::format(
            "{}'s plan breaks the relaxation's constraint '{}' by {:.3g} of its step: the "
            "bound would not hold",
            start_name, worst, violation));
      }
      solver.start = std::move(start);
      hybrid = std::move(result.best);
    }
  }

  if (options_.solving) options_.solving();
  ASSIGN_OR_RETURN(const SolverResult solved, SolveMilp(program, solver));
  PlanResult result;
  PlanResult::Bound bound = relaxation.BoundOf(solved);
  result.hit_time_limit = !bound.solved;

  std::optional<Evaluation> own;
  if (!solved.point.empty()) {
    ASSIGN_OR_RETURN(Evaluation evaluation, context.Evaluate(relaxation.PlanOf(solved.point)));
    bound.relaxation_plan = true;
    bound.relaxation_plan_step_s = evaluation.step_time_s();
    bound.relaxation_plan_arena_bytes = evaluation.arena_bytes();
    bound.relaxation_plan_fits = context.Fits(evaluation);
    own = std::move(evaluation);
  }
  if (own.has_value() && (!hybrid.has_value() || Better(*own, *hybrid, context.budget_bytes()))) {
    result.best = std::move(*own);
    bound.returned = "relaxation";
  } else if (hybrid.has_value()) {
    result.best = std::move(*hybrid);
    bound.returned = start_name;
  } else {
    // Nothing fits, or the solver stopped before any solution: the smallest
    // arena seen (RunPolicy reports it, as for every policy that cannot fit).
    if (context.smallest().has_value()) {
      result.best = *context.smallest();
    } else {
      ASSIGN_OR_RETURN(result.best, context.Evaluate(context.KeepAll("optimal")));
    }
    bound.returned = "none";
  }
  result.bound = std::move(bound);
  return result;
}

}  // namespace spillway::planner
