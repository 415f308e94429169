// `spillway plan` and `spillway compare`: one policy, or all of them side by
// side, on one workload, hardware profile and budget.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "analysis/cost_model.h"
#include "analysis/costs_file.h"
#include "analysis/hardware.h"
#include "autodiff/training_graph.h"
#include "cli/commands.h"
#include "cli/option_validators.h"
#include "cli/plan_flags.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "nlohmann/json.hpp"
#include "nodelink/node_link.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "planner/step_relaxation.h"
#include "session/planning.h"
#include "sim/chrome_trace.h"
#include "sim/memory_plot.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::cli {
namespace {

// What a bound proved, the gap of the plan at `plan_step_s` (if any) to it,
// and for the exact policy what its own plan turned out to be.
void PrintBound(std::ostream& out, const planner::PlanResult::Bound& bound,
                const planner::PlanResult* plan) {
  const bool alone = bound.returned.empty();  // --bound's LP, not the exact policy
  const std::string ended = bound.solved ? "proven"
                            : alone      ? "its time limit stopped the LP, so only none's step is"
                                         : "best proven before --solver-time-limit stopped it";
  const std::string how =
      fmt::format("{} by {} in {:.2f} s, {} columns, {} rows", ended, alone ? "an LP (Clp)" : "CBC",
                  bound.solve_s, bound.columns, bound.rows);
  const bool refetching =
      plan != nullptr && plan->feasible && !planner::BoundCovers(plan->best.plan);
  if (!std::isfinite(bound.step_s)) {
    // The bound covers plans that fetch each tensor once; this one does not.
    fmt::print(out, "Bound        no plan {}fits this budget ({})\n",
               refetching ? "that fetches each tensor once " : "", how);
  } else {
    fmt::print(out, "Bound        no plan that fits steps faster than {:.4g} s ({})\n",
               bound.step_s, how);
  }
  if (plan != nullptr && plan->feasible) {
    if (!refetching) {
      if (std::isfinite(bound.step_s)) {
        fmt::print(
            out, "Gap          this plan is within {} of that bound\n",
            FormatSignedPercent(planner::GapToBound(plan->best.step_time_s(), bound.step_s)));
      }
    } else {
      fmt::print(out,
                 "Gap          none: this plan drops {} tensors between reads and fetches them "
                 "again, which the bound does not cover (--fetch-once plans within it)\n",
                 plan->best.plan.CountRefetched());
    }
  }
  if (alone) return;
  if (bound.relaxation_plan) {
    fmt::print(out,
               "Relaxation   its optimum's plan: {:.4g} s, arena {} ({}); returned {}'s plan\n",
               bound.relaxation_plan_step_s, FormatBytes(bound.relaxation_plan_arena_bytes),
               bound.relaxation_plan_fits ? "fits after layout" : "does not fit after layout",
               bound.returned);
  } else {
    fmt::print(out, "Relaxation   the solver found no solution in time; returned {}'s plan\n",
               bound.returned);
  }
}

void PrintPlanning(std::ostream& out, const planner::PlanResult& result) {
  fmt::print(out,
             "Planning     {:.2f} s, {} candidate plans ({} laid out){}, {} backward order{}{}\n",
             result.planning_s, result.evaluations, result.laid_out,
             result.start.empty() ? "" : fmt::format(", refined from {}", result.start),
             program::BackwardOrderName(result.backward_order),
             result.orders_planned > 1
                 ? fmt::format(" (the fastest plan of {} orders)", result.orders_planned)
                 : "",
             result.hit_time_limit
                 ? "; stopped by --time-limit before converging (the plan depends on this "
                   "machine's speed)"
                 : "");
  if (!result.tuning.empty()) fmt::print(out, "Tuning       {}\n", result.tuning);
  if (result.bound.has_value()) {
    PrintBound(out, *result.bound, &result);
  }
  if (result.race.empty()) return;
  std::vector<std::string> entries;
  for (const planner::PlanResult::Refinement& refinement : result.race) {
    entries.push_back(fmt::format("{} {:.4g} -> {:.4g} s ({} candidates{})", refinement.start,
                                  refinement.start_step_s, refinement.step_s,
                                  refinement.evaluations,
                                  refinement.finished    ? ""
                                  : refinement.timed_out ? ", stopped by --time-limit"
                                                         : ", left the race"));
  }
  fmt::print(out, "Race         {}\n", fmt::join(entries, "; "));
}

void PrintPlan(std::ostream& out, const session::PlanningSession& session,
               const planner::PlanResult& result, const planner::PlanResult& none) {
  const sim::SimulationResult& simulation = result.best.simulation;
  fmt::print(out, "Workload     {}\n", session.Describe());
  if (!result.feasible) {
    fmt::print(out,
               "Policy       {}: infeasible: the smallest arena it reaches is {} (budget {}); "
               "rerun with --budget {} or more\n",
               result.policy, FormatBytes(result.smallest_arena_bytes),
               FormatBytes(session.budget_bytes()), result.smallest_arena_bytes);
    PrintPlanning(out, result);
    return;
  }
  const program::Plan& plan = result.best.plan;
  fmt::print(out, "Policy       {}: feasible\n", result.policy);
  const int64_t workspace = result.best.program.workspace_bytes;
  fmt::print(out, "Arena        {} of the {} budget (none needs {}){}\n",
             FormatBytes(result.best.arena_bytes()), FormatBytes(session.budget_bytes()),
             FormatBytes(none.best.arena_bytes()),
             workspace > 0 ? fmt::format("; {} of it kernel workspace", FormatBytes(workspace))
                           : std::string());
  fmt::print(out, "Step time    {:.4g} s predicted, none {:.4g} s: overhead {}\n",
             simulation.step_time_s, none.best.step_time_s(),
             FormatSignedPercent(simulation.step_time_s / none.best.step_time_s() - 1.0));
  const int refetched = plan.CountRefetched();
  fmt::print(out, "Transfers    {} to host, {} back ({} tensors spilled{})\n",
             FormatBytes(simulation.d2h_bytes), FormatBytes(simulation.h2d_bytes),
             plan.Count(program::Decision::kSpill),
             refetched > 0
                 ? fmt::format(", {} of them dropped between reads and fetched again", refetched)
                 : "");
  fmt::print(out, "Recompute    {}FLOP in {:.3g} s ({} tensors)\n",
             FormatCount(static_cast<double>(simulation.recompute_flops)), simulation.recompute_s,
             plan.Count(program::Decision::kRecompute));
  const sim::SimulationResult::ComputeStalls& stalls = simulation.compute_stalls;
  fmt::print(out,
             "Stalls       compute stream waits {:.3g} s: {:.3g} s for fetches, {:.3g} s for arena "
             "bytes not yet released (a spill still copying out), {:.3g} s other\n",
             simulation.streams[0].stall_s, stalls.fetch_s, stalls.memory_s,
             stalls.spill_s + stalls.other_s);
  PrintPlanning(out, result);
}

}  // namespace

CommandRunner AddPlanCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "plan", "Plan one policy for a workload under a memory budget and predict its step time");
  auto flags = std::make_shared<PlanFlags>();
  AddPlanFlags(*command, *flags);
  command
      ->add_option("--policy", flags->policy,
                   "The planning policy (docs/planner.md says what each does)")
      ->check(CLI::IsMember(planner::PolicyNames(/*with_exact=*/true)))
      ->capture_default_str();
  command
      ->add_option("--solver-time-limit", flags->optimal.solver_time_limit_s,
                   "--policy optimal: stop the integer program's solver after this many seconds "
                   "(the plan and bound found so far are kept, and the result says so)")
      ->check(Number(kPositiveNumber))
      ->capture_default_str();
  command
      ->add_option("--write-model", flags->optimal.model_path,
                   "--policy optimal: also write its integer program to this file, in LP form "
                   "(*.lp) or MPS form (*.mps), for other solvers")
      ->check(NotEmpty());
  command
      ->add_option("--trace", flags->trace_path,
                   "Write the simulated step as a Chrome trace (open in Perfetto)")
      ->check(NotEmpty());
  command
      ->add_option("--memory-plot", flags->memory_plot_path,
                   "Write device memory over the step as an SVG plot")
      ->check(NotEmpty());
  command
      ->add_option("--dump-program", flags->program_path,
                   "Write the Program (every instruction, buffer and event) as text")
      ->check(NotEmpty());
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    // The outputs are checked before planning, and written together at the end.
    const std::vector<std::pair<std::string, std::string>> outputs = {
        {flags->trace_path, "trace"},
        {flags->memory_plot_path, "memory plot"},
        {flags->program_path, "program dump"}};
    for (const auto& [path, what] : outputs) {
      if (!path.empty()) RETURN_IF_ERROR(CheckOutputPath(path, what));
    }
    const bool optimal = flags->policy == "optimal";
    for (const char* option : {"--solver-time-limit", "--write-model"}) {
      if (!optimal && command->count(option) > 0) {
        return absl::InvalidArgumentError(
            fmt::format("{} applies to --policy optimal only", option));
      }
    }
    if (const std::string& model = flags->optimal.model_path; !model.empty()) {
      if (!model.ends_with(".lp") && !model.ends_with(".mps")) {
        return absl::InvalidArgumentError(fmt::format(
            "--write-model '{}': name the file *.lp (LP form) or *.mps (MPS form)", model));
      }
      RETURN_IF_ERROR(CheckOutputPath(model, "model"));
    }
    RETURN_IF_ERROR(CheckGraphFileFlags(*command, *flags));
    TerminalObserver observer;
    ASSIGN_OR_RETURN(std::unique_ptr<session::PlanningSession> session,
                     session::PlanningSession::Create(MakeRequest(*flags), &observer));
    // Before planning, which --backward-order each makes the longer.
    if (flags->bound) RETURN_IF_ERROR(session->CheckOneOrder("--bound"));
    ASSIGN_OR_RETURN(planner::PlanResult none, session->Run("none"));
    absl::StatusOr<planner::PlanResult> planned =
        optimal ? session->RunOptimal(flags->optimal) : session->Run(flags->policy);
    ASSIGN_OR_RETURN(planner::PlanResult result, std::move(planned));
    if (flags->bound && !result.bound.has_value()) {
      ASSIGN_OR_RETURN(result.bound, session->ProveBound());
    }
    const std::string title = fmt::format("{}: {}", result.policy, session->Describe());
    OutputFiles files;
    if (!flags->trace_path.empty()) {
      RETURN_IF_ERROR(files.Add(
          flags->trace_path,
          sim::ChromeTraceJson(result.best.program, result.best.simulation, title), "trace"));
    }
    if (!flags->memory_plot_path.empty()) {
      RETURN_IF_ERROR(files.Add(flags->memory_plot_path,
                                sim::MemoryPlotSvg(result.best.simulation, session->budget_bytes(),
                                                   result.best.arena_bytes(), title),
                                "memory plot"));
    }
    if (!flags->program_path.empty()) {
      RETURN_IF_ERROR(files.Add(flags->program_path, program::ProgramToText(result.best.program),
                                "program dump"));
    }
    RETURN_IF_ERROR(files.Commit());
    if (flags->json) {
      out << session::PlanResultToJson(result, none, nullptr, session->budget_bytes()).dump(2)
          << "\n";
    } else {
      PrintPlan(out, *session, result, none);
    }
    return absl::OkStatus();
  };
}

CommandRunner AddCompareCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "compare", "Run every policy on one workload and budget and compare them in one table");
  auto flags = std::make_shared<PlanFlags>();
  auto with_optimal = std::make_shared<bool>(false);
  AddPlanFlags(*command, *flags);
  command->add_flag("--optimal", *with_optimal,
                    "Also run the exact policy (small graphs): its row, its proven lower bound "
                    "on the step, and every plan's gap to that bound");
  command
      ->add_option("--solver-time-limit", flags->optimal.solver_time_limit_s,
                   "With --optimal: stop its solver after this many seconds")
      ->check(Number(kPositiveNumber))
      ->capture_default_str();
  return [command, flags, with_optimal](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    if (!*with_optimal && command->count("--solver-time-limit") > 0) {
      return absl::InvalidArgumentError("--solver-time-limit applies with --optimal only");
    }
    RETURN_IF_ERROR(CheckGraphFileFlags(*command, *flags));
    TerminalObserver observer;
    ASSIGN_OR_RETURN(std::unique_ptr<session::PlanningSession> session,
                     session::PlanningSession::Create(MakeRequest(*flags), &observer));
    session::CompareOptions options;
    options.optimal = *with_optimal;
    options.optimal_options = flags->optimal;
    options.bound = flags->bound;
    ASSIGN_OR_RETURN(const session::Comparison comparison, session::Compare(*session, options));
    if (flags->json) {
      out << session::ComparisonToJson(comparison, session->budget_bytes()).dump(2) << "\n";
      return absl::OkStatus();
    }
    const std::optional<planner::PlanResult::Bound>& proven = comparison.bound;
    std::optional<double> bound_s;
    if (proven.has_value() && std::isfinite(proven->step_s)) bound_s = proven->step_s;
    const planner::PlanResult& none = comparison.none();
    const planner::PlanResult* swap = comparison.Find("swap");
    // Every policy plans in the session's backward order, but hybrid in each
    // order with --backward-order each (said below the table).
    fmt::print(out, "{}, {} backward order\n", session->Describe(),
               program::BackwardOrderName(session->context().backward_order()));
    fmt::print(out, "{:<15} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}{}\n",
               "policy", "arena", "step (s)", "overhead", "vs swap", "stall (s)", "to host", "back",
               "recompute", "plan (s)",
               bound_s.has_value() ? fmt::format(" {:>9}", "vs bound") : "");
    bool uncovered = false;  // a plan fetches tensors again: no gap to the bound
    for (const planner::PlanResult& result : comparison.results) {
      if (!result.feasible) {
        fmt::print(out, "{:<15} infeasible: needs at least {}\n", result.policy,
                   FormatBytes(result.smallest_arena_bytes));
        continue;
      }
      const sim::SimulationResult& s = result.best.simulation;
      const std::string versus =
          swap != nullptr && swap->feasible
              ? FormatSignedPercent(swap->best.step_time_s() / s.step_time_s - 1.0)
              : "-";
      fmt::print(
          out, "{:<15} {:>10} {:>10.4g} {:>10} {:>9} {:>9.3g} {:>10} {:>10} {:>10} {:>9.2f}{}\n",
          result.policy, FormatBytes(result.best.arena_bytes()), s.step_time_s,
          FormatSignedPercent(s.step_time_s / none.best.step_time_s() - 1.0), versus,
          s.streams[0].stall_s, FormatBytes(s.d2h_bytes), FormatBytes(s.h2d_bytes),
          FormatCount(static_cast<double>(s.recompute_flops)) + "F", result.planning_s,
          !bound_s.has_value() ? ""
          : planner::BoundCovers(result.best.plan)
              ? fmt::format(" {:>9}",
                            FormatSignedPercent(planner::GapToBound(s.step_time_s, *bound_s)))
              : fmt::format(" {:>9}", "-"));
      uncovered = uncovered || !planner::BoundCovers(result.best.plan);
    }
    for (const std::string& name : comparison.not_run) {
      fmt::print(out, "{:<15} not run: it spills, and there is no host link\n", name);
    }
    fmt::print(out, "\n'vs swap' is how much faster a step is than with swap (+: faster).\n");
    if (session->context().options().every_backward_order) {
      const planner::PlanResult* hybrid = comparison.Find("hybrid");
      if (hybrid != nullptr) {
        fmt::print(out, "hybrid planned in every backward order: its plan is the {} order's.\n",
                   program::BackwardOrderName(hybrid->backward_order));
      }
    }
    if (proven.has_value()) {
      fmt::print(out, "\n");
      PrintBound(out, *proven, nullptr);
      if (bound_s.has_value()) {
        fmt::print(out,
                   "'vs bound' is how much slower a step is than that bound: at most that far "
                   "from the best possible{}.\n",
                   uncovered ? " (-: the plan drops tensors between reads and fetches them again, "
                               "which the bound does not cover)"
                             : "");
      }
    }
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
