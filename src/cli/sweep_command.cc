// `spillway sweep`: a policy, or several, planned at several budgets of one
// workload, as tables of step time and overhead against memory and a plot
// of them side by side (session/sweep.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/option_validators.h"
#include "cli/plan_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "nlohmann/json.hpp"
#include "planner/planner.h"
#include "session/sweep.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::cli {
namespace {

struct SweepFlags {
  PlanFlags plan;
  std::string from = session::SweepBudgets().from;
  std::string to = session::SweepBudgets().to;
  int points = session::SweepBudgets().points;
  std::vector<std::string> budgets;  // instead of from, to and points
  std::vector<std::string> policies = {"hybrid"};
  std::string plot_path;
};

// The workload and what `none` needs, once for all the sweeps.
void PrintHeader(std::ostream& out, const session::PlanningSession& session,
                 const session::Sweep& sweep) {
  fmt::print(out, "Workload     {}\n", session.Describe(/*with_budget=*/false));
  fmt::print(out, "None         arena {}, step {:.4g} s\n",
             FormatBytes(sweep.none.best.arena_bytes()), sweep.none.best.step_time_s());
}

void PrintSweep(std::ostream& out, const session::Sweep& sweep) {
  const planner::PlanResult& none = sweep.none;
  const double none_arena = static_cast<double>(none.best.arena_bytes());
  fmt::print(out, "\nPolicy       {}{}\n\n", sweep.policy,
             sweep.policy == "hybrid"
                 ? ": each budget also refines the plan of the budget below, so the step "
                   "never rises with the budget"
                 : "");
  fmt::print(out, "{:>10} {:>8} {:>10} {:>10} {:>9} {:>10} {:>10} {:>9}  {}\n", "budget", "of none",
             "arena", "step (s)", "overhead", "to host", "recompute", "plan (s)", "plan made at");
  for (const session::SweepPoint& point : sweep.points) {
    const planner::PlanResult& result = point.result;
    const std::string share =
        fmt::format("{:.0f}%", 100 * static_cast<double>(point.budget_bytes) / none_arena);
    if (!result.feasible) {
      fmt::print(out, "{:>10} {:>8} infeasible: needs at least {}\n",
                 FormatBytes(point.budget_bytes), share, FormatBytes(result.smallest_arena_bytes));
      continue;
    }
    const sim::SimulationResult& s = result.best.simulation;
    fmt::print(out, "{:>10} {:>8} {:>10} {:>10.4g} {:>9} {:>10} {:>10} {:>9.2f}  {}\n",
               FormatBytes(point.budget_bytes), share, FormatBytes(result.best.arena_bytes()),
               s.step_time_s, FormatSignedPercent(s.step_time_s / none.best.step_time_s() - 1.0),
               FormatBytes(s.d2h_bytes), FormatCount(static_cast<double>(s.recompute_flops)) + "F",
               result.planning_s,
               point.carried_from_bytes >= 0 ? FormatBytes(point.carried_from_bytes)
                                             : std::string("this budget"));
  }
}

}  // namespace

CommandRunner AddSweepCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "sweep",
      "Plan a policy, or several, at several budgets and tabulate step time and overhead "
      "against memory");
  auto flags = std::make_shared<SweepFlags>();
  AddPlanFlags(*command, flags->plan, /*one_budget=*/false);
  command
      ->add_option("--policy", flags->policies,
                   "The planning policy (docs/planner.md says what each does), or several, "
                   "comma-separated (swap,hybrid): a sweep each, side by side in the plot")
      ->delimiter(',')
      ->check(CLI::IsMember(planner::PolicyNames(/*with_exact=*/false)))
      ->capture_default_str();
  CLI::Option* from_option =
      command
          ->add_option("--from", flags->from,
                       "The smallest budget, as a share of the arena none needs (what the step "
                       "takes with every tensor kept)")
          ->capture_default_str();
  CLI::Option* to_option =
      command->add_option("--to", flags->to, "The largest budget, the same way")
          ->capture_default_str();
  CLI::Option* points_option =
      command
          ->add_option("--points", flags->points,
                       "Budgets from --from to --to, evenly spaced, both ends "
                       "included")
          ->check(Integer(1, 1000))
          ->capture_default_str();
  command
      ->add_option("--budgets", flags->budgets,
                   "The budgets instead, comma-separated: bytes (12GiB, 512MiB, 17179869184) or "
                   "shares of the profile's memory (60%)")
      ->delimiter(',')
      ->check(NotEmpty())
      ->excludes(from_option)
      ->excludes(to_option)
      ->excludes(points_option);
  command
      ->add_option("--plot", flags->plot_path,
                   "Write the overhead against the budget as an SVG plot")
      ->check(NotEmpty());
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    // Checked before planning, written at the end.
    if (!flags->plot_path.empty()) RETURN_IF_ERROR(CheckOutputPath(flags->plot_path, "plot"));
    RETURN_IF_ERROR(CheckGraphFileFlags(*command, flags->plan));
    session::SweepBudgets wanted{
        .sizes = flags->budgets, .from = flags->from, .to = flags->to, .points = flags->points};
    // Before the session, which builds the step: a bad share is refused at once.
    RETURN_IF_ERROR(session::CheckSweepBudgets(wanted));
    for (const std::string& policy : flags->policies) {
      if (std::ranges::count(flags->policies, policy) > 1) {
        return absl::InvalidArgumentError(fmt::format("--policy names {} twice", policy));
      }
    }
    TerminalObserver observer;
    ASSIGN_OR_RETURN(std::unique_ptr<session::PlanningSession> session,
                     session::PlanningSession::Create(MakeRequest(flags->plan), &observer));
    ASSIGN_OR_RETURN(std::vector<int64_t> budgets, session::ResolveBudgets(*session, wanted));
    std::vector<session::Sweep> sweeps;
    for (const std::string& policy : flags->policies) {
      ASSIGN_OR_RETURN(session::Sweep sweep, session::RunSweep(*session, policy, budgets));
      sweeps.push_back(std::move(sweep));
    }
    if (!flags->plot_path.empty()) {
      OutputFiles files;
      std::vector<const session::Sweep*> drawn;
      for (const session::Sweep& sweep : sweeps) drawn.push_back(&sweep);
      RETURN_IF_ERROR(files.Add(flags->plot_path, session::SweepPlot(*session, drawn), "plot"));
      RETURN_IF_ERROR(files.Commit());
    }
    if (flags->plan.json) {
      // One policy: its sweep; several: a list of them.
      nlohmann::json json = nlohmann::json::array();
      for (const session::Sweep& sweep : sweeps)
        json.push_back(session::SweepToJson(*session, sweep));
      out << (sweeps.size() == 1 ? json[0] : json).dump(2) << "\n";
    } else {
      PrintHeader(out, *session, sweeps.front());
      for (const session::Sweep& sweep : sweeps) PrintSweep(out, sweep);
    }
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
