#include "planner/policies.h"
#include "support/status_macros.h"

namespace spillway::planner {

absl::StatusOr<PlanResult> NonePolicy::Run(PlanningContext& context) {
  ASSIGN_OR_RETURN(Evaluation evaluation, context.Evaluate(context.KeepAll("none")));
  PlanResult result;
  result.best = std::move(evaluation);
  return result;
}

}  // namespace spillway::planner
