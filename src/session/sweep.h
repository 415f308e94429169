// A budget sweep: one policy planned at several budgets of one workload, the
// smallest budget first (`spillway sweep`). It answers what a step costs with
// each amount of memory, and how much memory a step within some overhead
// needs.
//
// For hybrid the sweep is monotone by construction: every budget is given
// the plan made for the budget below it as a seed (HybridPolicy::Seed: a
// plan that fits a budget fits every larger one), refined after everything
// the planner does without it, and the point keeps that plan, as it was laid
// out there, wherever no plan made at its own budget is faster. So hybrid's
// step never rises as the budget grows along a sweep, which independent
// `plan` runs do not promise (the refinement is a local search, and with
// more memory it can end in a worse local optimum), and no budget plans
// slower than `plan` alone would plan it (docs/planner.md, "Budget
// sweeps"). The other policies are planned at each budget as they are, so
// that a sweep shows them as `plan` would.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "planner/planner.h"
#include "session/planning.h"

namespace spillway::session {

struct SweepPoint {
  int64_t budget_bytes = 0;
  planner::PlanResult result;
  // hybrid: the smaller budget at which the point's plan was made, where no
  // plan made at this budget was faster; -1 where the plan is this budget's.
  int64_t carried_from_bytes = -1;
};

struct Sweep {
  std::string policy;
  planner::PlanResult none;        // the step every overhead is measured against
  std::vector<SweepPoint> points;  // the budgets in increasing order
};

// The budgets of a sweep as the command line and the Python module take
// them: sizes, or a number of budgets evenly spaced between two shares of the
// arena `none` needs. Errors name the command line's flags.
struct SweepBudgets {
  // --budgets: bytes or shares of the profile's memory, as --budget takes
  // them; when given, the rest is not used.
  std::vector<std::string> sizes;
  std::string from = "30%";  // --from
  std::string to = "100%";   // --to
  int points = 8;            // --points
};
// What can be checked before the workload is built: the shares and points.
absl::Status CheckSweepBudgets(const SweepBudgets& budgets);
// The budgets in bytes: the sizes, or the spaced shares of the arena `none`
// needs at the session's budget (planned here).
absl::StatusOr<std::vector<int64_t>> ResolveBudgets(PlanningSession& session,
                                                    const SweepBudgets& budgets);

// `points` budgets evenly spaced from `from` to `to` (shares of `arena_bytes`,
// 0 < from <= to <= 1; `points` >= 1, and 1 only where from == to), each
// rounded down to a byte and at least 1.
absl::StatusOr<std::vector<int64_t>> SpacedBudgets(int64_t arena_bytes, double from, double to,
                                                   int points);

// Plans `policy` (a registry name) at each of `budgets` (distinct, at least 1
// byte; planned in increasing order whatever their order here) on the
// session's workload. `none` is planned first, at the session's budget as it
// is when called: the backward order the planner chooses, and so the arena
// none needs, can depend on the budget, and the shares a sweep reports are
// of none's arena there (`spillway sweep` calls it at the profile's memory,
// where the budgets were chosen). On success the session is back at the
// budget it had, so that sweeps of several policies measure against the same
// `none`.
// Its observer sees each budget's planning as "hybrid at 12.0 GiB (3/8)".
absl::StatusOr<Sweep> RunSweep(PlanningSession& session, std::string_view policy,
                               std::vector<int64_t> budgets);

// The sweep as `spillway sweep --json` prints it: the workload, none's plan,
// and one PlanResultToJson object per budget, with `carried_from_bytes`
// where the plan was made at a smaller budget.
nlohmann::json SweepToJson(const PlanningSession& session, const Sweep& sweep);

// Sweeps of the session's workload as `spillway sweep --plot` draws them
// (sim/sweep_plot.h): each policy's overhead over none against the budget,
// titled with the workload (and the policy, where there is one).
std::string SweepPlot(const PlanningSession& session, std::span<const Sweep* const> sweeps);

}  // namespace spillway::session
