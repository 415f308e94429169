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
#include "cli/planning_progress.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "nlohmann/json.hpp"
#include "nodelink/node_link.h"
#include "planner/planner.h"
#include "planner/policies.h"
#include "planner/step_relaxation.h"
#include "sim/chrome_trace.h"
#include "sim/memory_plot.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::cli {
namespace {

struct PlanFlags {
  WorkloadFlags workload;
  std::string optimizer = "sgd";
  std::string hardware = "v100-16g-nvlink2";
  std::string budget;
  std::string math_mode = "fp32";
  std::string policy = "hybrid";
  planner::PlannerOptions planner;  // all but the budget
  std::string trace_path;
  std::string memory_plot_path;
  std::string program_path;
  bool json = false;
  planner::OptimalOptions optimal;  // plan --policy optimal only
  bool bound = false;               // also prove a lower bound on the step
  bool no_link = false;             // the device cannot reach host memory
  std::string costs;                // a costs file of measured times (spillway profile)
};

void AddPlanFlags(CLI::App& command, PlanFlags& flags) {
  AddWorkloadFlags(command, flags.workload, GraphFiles::kAccepted);
  command.add_option("--optimizer", flags.optimizer, "Optimizer whose state the step holds")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  command
      .add_option("--hardware", flags.hardware,
                  "Hardware profile: a preset (see `spillway hardware`) or a JSON file")
      ->check(NotEmpty())
      ->capture_default_str();
  command
      .add_option("--budget", flags.budget,
                  "Device memory for the step: bytes (16GiB, 512MiB, 17179869184) or a share "
                  "of the profile's memory (60%); default: the profile's memory less its "
                  "reserve")
      ->check(NotEmpty());
  command
      .add_option("--math-mode", flags.math_mode,
                  "Arithmetic of convolutions and matrix products, for their compute rate")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16"}))
      ->capture_default_str();
  AddPlannerFlags(command, flags.planner);
  command.add_flag(
      "--no-link", flags.no_link,
      "The device has no link to host memory: plan with recomputation only (none, recompute "
      "and optimal run; the policies that spill refuse)");
  command
      .add_option("--costs", flags.costs,
                  "Plan and simulate with the node and copy times a costs file measured "
                  "(`spillway profile`); nodes it lacks keep the roofline's")
      ->check(NotEmpty());
  command.add_flag("--bound", flags.bound,
                   "Also prove a lower bound on the step of every plan that fits (a linear "
                   "program solved by Clp; any graph size) and print each plan's gap to it");
  command.add_flag("--json", flags.json, "Print the result as JSON (bytes, seconds, FLOPs)");
}

// The workload, costed and ready to plan.
struct PlanningWorkload {
  autodiff::TrainingGraph training;
  analysis::HardwareProfile profile;
  std::unique_ptr<analysis::CostModel> cost_model;
  int64_t budget_bytes = 0;
  PlanningProgress progress;
  std::unique_ptr<planner::PlanningContext> context;
};

// The options that describe a model's training step, which a graph file
// already is: refused with --graph rather than silently ignored.
absl::Status CheckGraphFileFlags(const CLI::App& command, const PlanFlags& flags) {
  if (flags.workload.graph.empty()) {
    for (const char* option : {"--graph-duration", "--graph-size", "--graph-time-unit"}) {
      if (command.count(option) > 0) {
        return absl::InvalidArgumentError(fmt::format("{} applies to --graph only", option));
      }
    }
    return absl::OkStatus();
  }
  for (const char* option : {"--optimizer", "--math-mode", "--costs"}) {
    if (command.count(option) > 0) {
      return absl::InvalidArgumentError(fmt::format(
          "{} does not apply to --graph: the file is the whole step, with its own costs", option));
    }
  }
  return absl::OkStatus();
}

// The planning context over the workload's graph and costs.
std::unique_ptr<PlanningWorkload> Finish(const PlanFlags& flags,
                                         std::unique_ptr<PlanningWorkload> workload) {
  planner::PlannerOptions options = flags.planner;
  options.host_link = !flags.no_link;
  options.budget_bytes = workload->budget_bytes;
  options.progress = [progress = &workload->progress](int evaluations) {
    progress->Draw(evaluations);
  };
  workload->context = std::make_unique<planner::PlanningContext>(
      workload->training.graph, *workload->cost_model, workload->profile, options);
  return workload;
}

// Replaces the roofline by the times a costs file measured (the roofline
// stays for the nodes the file lacks), saying on stderr what they are.
absl::Status UseCostsFile(const std::string& path, PlanningWorkload& workload) {
  ASSIGN_OR_RETURN(const analysis::MeasuredCosts costs, analysis::LoadCostsFile(path));
  ASSIGN_OR_RETURN(analysis::MeasuredCostModel measured,
                   analysis::MakeMeasuredCostModel(costs, workload.training.graph,
                                                   std::move(workload.cost_model)));
  const analysis::MeasuredCosts::Configuration& on = costs.measured_on;
  fmt::print(std::cerr,
             "costs: {} of {} nodes and the copies from {} (measured on {}, {} backend, {} "
             "threads, {}, {}){}\n",
             measured.matched, measured.matched + measured.unmatched, path, on.machine, on.backend,
             on.threads, on.isa, on.date,
             measured.unmatched > 0
                 ? fmt::format("; {} nodes it lacks keep the roofline's times", measured.unmatched)
                 : "");
  workload.cost_model = std::move(measured.model);
  return absl::OkStatus();
}

absl::Status PrepareGraph(const PlanFlags& flags, PlanningWorkload& workload) {
  ASSIGN_OR_RETURN(nodelink::CostedGraph costed, LoadGraphFile(flags.workload));
  workload.training.graph = std::move(costed.graph);
  workload.cost_model = std::make_unique<analysis::TabulatedCostModel>(
      std::vector<std::optional<double>>(costed.node_seconds.begin(), costed.node_seconds.end()),
      std::make_unique<analysis::RooflineCostModel>(workload.profile));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PlanningWorkload>> Prepare(const PlanFlags& flags) {
  auto workload = std::make_unique<PlanningWorkload>();
  if (flags.workload.graph.empty() && flags.workload.model.empty() == flags.workload.onnx.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model, --onnx and --graph");
  }
  if (!flags.workload.graph.empty()) {
    ASSIGN_OR_RETURN(workload->profile, analysis::LoadHardwareProfile(flags.hardware));
    ASSIGN_OR_RETURN(workload->budget_bytes, planner::ParseBudget(flags.budget, workload->profile));
    RETURN_IF_ERROR(PrepareGraph(flags, *workload));
    return Finish(flags, std::move(workload));
  }
  ASSIGN_OR_RETURN(const Workload built, BuildWorkload(flags.workload));
  const ir::Graph& forward = built.graph;
  autodiff::OptimizerOptions optimizer;
  optimizer.kind =
      flags.optimizer == "adamw" ? autodiff::OptimizerKind::kAdam : autodiff::OptimizerKind::kSgd;
  ASSIGN_OR_RETURN(workload->training, autodiff::BuildTrainingGraph(forward, optimizer));
  ASSIGN_OR_RETURN(workload->profile, analysis::LoadHardwareProfile(flags.hardware));
  ASSIGN_OR_RETURN(workload->budget_bytes, planner::ParseBudget(flags.budget, workload->profile));
  analysis::RooflineCostModel::Options cost_options;
  // CLI11 has checked the name.
  cost_options.math_mode =
      analysis::ParseMathMode(flags.math_mode).value_or(analysis::MathMode::kFp32);
  workload->cost_model =
      std::make_unique<analysis::RooflineCostModel>(workload->profile, cost_options);
  if (!flags.costs.empty()) RETURN_IF_ERROR(UseCostsFile(flags.costs, *workload));
  return Finish(flags, std::move(workload));
}

absl::StatusOr<planner::PlanResult> Run(planner::Policy& policy, PlanningWorkload& workload,
                                        std::string label) {
  workload.progress.Begin(std::move(label), workload.context->evaluations());
  absl::StatusOr<planner::PlanResult> result = planner::RunPolicy(policy, *workload.context);
  workload.progress.Clear();
  return result;
}

absl::StatusOr<planner::PlanResult> RunNamed(std::string_view name, PlanningWorkload& workload,
                                             std::string label = "") {
  ASSIGN_OR_RETURN(std::unique_ptr<planner::Policy> policy, planner::MakePolicy(name));
  return Run(*policy, workload, label.empty() ? std::string(name) : std::move(label));
}

// The progress line while the exact policy's solver runs (it reports
// nothing until it ends).
std::function<void()> SolvingLabel(PlanningWorkload& workload, double limit_s) {
  return [&workload, limit_s] {
    workload.progress.Begin(
        fmt::format("optimal: CBC solving its integer program (at most {:g} s)", limit_s),
        workload.context->evaluations());
  };
}

// The lower bound of --bound, with a progress line while the solver runs.
absl::StatusOr<planner::PlanResult::Bound> ProveBound(PlanningWorkload& workload) {
  const planner::StepBoundOptions options;
  workload.progress.Begin(
      fmt::format("lower bound: Clp solving its LP (at most {:g} s)", options.time_limit_s),
      workload.context->evaluations());
  absl::StatusOr<planner::PlanResult::Bound> bound =
      planner::LowerBoundOnStep(*workload.context, options);
  workload.progress.Clear();
  return bound;
}

std::string Header(const PlanFlags& flags, const PlanningWorkload& workload) {
  const std::string optimizer =
      flags.workload.graph.empty() ? fmt::format(" ({})", flags.optimizer) : "";
  return fmt::format("{}{} on {}{}, budget {}", DescribeWorkload(flags.workload), optimizer,
                     workload.profile.name, flags.no_link ? " without a host link" : "",
                     FormatBytes(workload.budget_bytes));
}

nlohmann::json ResultToJson(const planner::PlanResult& result, const planner::PlanResult& none,
                            const planner::PlanResult* swap, int64_t budget_bytes) {
  const sim::SimulationResult& simulation = result.best.simulation;
  const program::Plan& plan = result.best.plan;
  nlohmann::json json = {
      {"policy", result.policy},
      {"feasible", result.feasible},
      {"budget_bytes", budget_bytes},
      {"arena_bytes", result.best.arena_bytes()},
      {"smallest_arena_bytes", result.smallest_arena_bytes},
      {"step_time_s", simulation.step_time_s},
      {"none_step_time_s", none.best.step_time_s()},
      {"overhead", simulation.step_time_s / none.best.step_time_s() - 1.0},
      {"d2h_bytes", simulation.d2h_bytes},
      {"h2d_bytes", simulation.h2d_bytes},
      {"host_bytes", result.best.program.host_bytes},
      {"recompute_flops", simulation.recompute_flops},
      {"recompute_s", simulation.recompute_s},
      {"compute_stall_s", simulation.streams[0].stall_s},
      {"compute_stall_fetch_s", simulation.compute_stalls.fetch_s},
      {"compute_stall_memory_s", simulation.compute_stalls.memory_s},
      {"compute_stall_other_s",
       simulation.compute_stalls.spill_s + simulation.compute_stalls.other_s},
      {"spilled_tensors", plan.Count(program::Decision::kSpill)},
      {"recomputed_tensors", plan.Count(program::Decision::kRecompute)},
      {"planning_ms", result.planning_s * 1e3},
      {"evaluations", result.evaluations},
      {"laid_out", result.laid_out},
      {"converged", !result.hit_time_limit},
  };
  if (!result.start.empty()) json["start"] = result.start;
  if (!result.tuning.empty()) json["tuning"] = result.tuning;
  if (!result.race.empty()) {
    nlohmann::json& race = json["race"] = nlohmann::json::array();
    for (const planner::PlanResult::Refinement& refinement : result.race) {
      race.push_back({{"start", refinement.start},
                      {"start_step_time_s", refinement.start_step_s},
                      {"step_time_s", refinement.step_s},
                      {"evaluations", refinement.evaluations},
                      {"finished", refinement.finished},
                      {"stopped_by_time_limit", refinement.timed_out}});
    }
  }
  if (result.bound.has_value()) {
    const planner::PlanResult::Bound& bound = *result.bound;
    nlohmann::json entry = {{"solved", bound.solved},
                            {"solve_s", bound.solve_s},
                            {"columns", bound.columns},
                            {"rows", bound.rows},
                            {"method", bound.returned.empty() ? "lp" : "milp"}};
    if (!bound.returned.empty()) entry["returned"] = bound.returned;
    // An infinite bound (nothing fits) is not a JSON number: null.
    if (std::isfinite(bound.step_s)) {
      entry["step_time_s"] = bound.step_s;
      if (result.feasible) entry["gap"] = simulation.step_time_s / bound.step_s - 1.0;
    } else {
      entry["step_time_s"] = nullptr;
    }
    if (bound.relaxation_plan) {
      entry["relaxation_plan"] = {{"step_time_s", bound.relaxation_plan_step_s},
                                  {"arena_bytes", bound.relaxation_plan_arena_bytes},
                                  {"fits", bound.relaxation_plan_fits}};
    }
    json["lower_bound"] = std::move(entry);
  }
  if (swap != nullptr && swap->feasible && result.feasible) {
    json["speedup_over_swap"] = swap->best.step_time_s() / simulation.step_time_s - 1.0;
  }
  return json;
}

std::string Percent(double fraction) { return fmt::format("{:+.1f}%", 100.0 * fraction); }

// What a bound proved, the gap of the plan at `plan_step_s` (if any) to it,
// and for the exact policy what its own plan turned out to be.
void PrintBound(std::ostream& out, const planner::PlanResult::Bound& bound,
                std::optional<double> plan_step_s) {
  const bool alone = bound.returned.empty();  // --bound's LP, not the exact policy
  const std::string ended = bound.solved ? "proven"
                            : alone      ? "its time limit stopped the LP, so only none's step is"
                                         : "best proven before --solver-time-limit stopped it";
  const std::string how =
      fmt::format("{} by {} in {:.2f} s, {} columns, {} rows", ended, alone ? "an LP (Clp)" : "CBC",
                  bound.solve_s, bound.columns, bound.rows);
  if (!std::isfinite(bound.step_s)) {
    fmt::print(out, "Bound        no plan fits this budget ({})\n", how);
    return;
  }
  fmt::print(out, "Bound        no plan that fits steps faster than {:.4g} s ({})\n", bound.step_s,
             how);
  if (plan_step_s.has_value()) {
    fmt::print(out, "Gap          this plan is within {} of that bound\n",
               Percent(*plan_step_s / bound.step_s - 1.0));
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
  fmt::print(out, "Planning     {:.2f} s, {} candidate plans ({} laid out){}{}\n",
             result.planning_s, result.evaluations, result.laid_out,
             result.start.empty() ? "" : fmt::format(", refined from {}", result.start),
             result.hit_time_limit
                 ? "; stopped by --time-limit before converging (the plan depends on this "
                   "machine's speed)"
                 : "");
  if (!result.tuning.empty()) fmt::print(out, "Tuning       {}\n", result.tuning);
  if (result.bound.has_value()) {
    PrintBound(out, *result.bound,
               result.feasible ? std::optional(result.best.step_time_s()) : std::nullopt);
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

void PrintPlan(std::ostream& out, const PlanFlags& flags, const PlanningWorkload& workload,
               const planner::PlanResult& result, const planner::PlanResult& none) {
  const sim::SimulationResult& simulation = result.best.simulation;
  fmt::print(out, "Workload     {}\n", Header(flags, workload));
  if (!result.feasible) {
    fmt::print(out,
               "Policy       {}: infeasible: the smallest arena it reaches is {} (budget {}); "
               "rerun with --budget {} or more\n",
               result.policy, FormatBytes(result.smallest_arena_bytes),
               FormatBytes(workload.budget_bytes), result.smallest_arena_bytes);
    PrintPlanning(out, result);
    return;
  }
  const program::Plan& plan = result.best.plan;
  fmt::print(out, "Policy       {}: feasible\n", result.policy);
  fmt::print(out, "Arena        {} of the {} budget (none needs {})\n",
             FormatBytes(result.best.arena_bytes()), FormatBytes(workload.budget_bytes),
             FormatBytes(none.best.arena_bytes()));
  fmt::print(out, "Step time    {:.4g} s predicted, none {:.4g} s: overhead {}\n",
             simulation.step_time_s, none.best.step_time_s(),
             Percent(simulation.step_time_s / none.best.step_time_s() - 1.0));
  fmt::print(out, "Transfers    {} to host, {} back ({} tensors spilled)\n",
             FormatBytes(simulation.d2h_bytes), FormatBytes(simulation.h2d_bytes),
             plan.Count(program::Decision::kSpill));
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
    ASSIGN_OR_RETURN(std::unique_ptr<PlanningWorkload> workload, Prepare(*flags));
    ASSIGN_OR_RETURN(planner::PlanResult none, RunNamed("none", *workload));
    std::unique_ptr<planner::Policy> policy;
    if (optimal) {
      planner::OptimalOptions options = flags->optimal;
      options.solving = SolvingLabel(*workload, options.solver_time_limit_s);
      policy = std::make_unique<planner::OptimalPolicy>(options);
    } else {
      ASSIGN_OR_RETURN(policy, planner::MakePolicy(flags->policy));
    }
    ASSIGN_OR_RETURN(planner::PlanResult result, Run(*policy, *workload, flags->policy));
    if (flags->bound && !result.bound.has_value()) {
      ASSIGN_OR_RETURN(result.bound, ProveBound(*workload));
    }
    const std::string title = fmt::format("{}: {}", result.policy, Header(*flags, *workload));
    OutputFiles files;
    if (!flags->trace_path.empty()) {
      RETURN_IF_ERROR(files.Add(
          flags->trace_path,
          sim::ChromeTraceJson(result.best.program, result.best.simulation, title), "trace"));
    }
    if (!flags->memory_plot_path.empty()) {
      RETURN_IF_ERROR(files.Add(flags->memory_plot_path,
                                sim::MemoryPlotSvg(result.best.simulation, workload->budget_bytes,
                                                   result.best.arena_bytes(), title),
                                "memory plot"));
    }
    if (!flags->program_path.empty()) {
      RETURN_IF_ERROR(files.Add(flags->program_path, program::ProgramToText(result.best.program),
                                "program dump"));
    }
    RETURN_IF_ERROR(files.Commit());
    if (flags->json) {
      out << ResultToJson(result, none, nullptr, workload->budget_bytes).dump(2) << "\n";
    } else {
      PrintPlan(out, *flags, *workload, result, none);
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
    ASSIGN_OR_RETURN(std::unique_ptr<PlanningWorkload> workload, Prepare(*flags));
    std::vector<planner::PlanResult> results;
    // The heuristics; without a host link, only those that do not spill.
    std::vector<std::string> names;
    std::vector<std::string> need_link;
    for (const planner::PolicyEntry& entry : planner::PolicyRegistry()) {
      if (entry.exact) continue;
      (flags->no_link && entry.needs_host_link ? need_link : names).push_back(entry.name);
    }
    const size_t total = names.size() + (*with_optimal ? 1 : 0);
    for (size_t i = 0; i < names.size(); ++i) {
      ASSIGN_OR_RETURN(
          planner::PlanResult result,
          RunNamed(names[i], *workload, fmt::format("{} ({}/{})", names[i], i + 1, total)));
      results.push_back(std::move(result));
    }
    // The bound every row is measured against: optimal's, or --bound's LP.
    std::optional<planner::PlanResult::Bound> proven;
    if (*with_optimal) {
      planner::OptimalOptions options = flags->optimal;
      options.solving = SolvingLabel(*workload, options.solver_time_limit_s);
      planner::OptimalPolicy optimal(options);
      ASSIGN_OR_RETURN(planner::PlanResult result,
                       Run(optimal, *workload, fmt::format("optimal ({}/{})", total, total)));
      proven = result.bound;
      results.push_back(std::move(result));
    } else if (flags->bound) {
      ASSIGN_OR_RETURN(proven, ProveBound(*workload));
    }
    std::optional<double> bound_s;
    if (proven.has_value() && std::isfinite(proven->step_s)) bound_s = proven->step_s;
    const planner::PlanResult& none = results[0];
    const planner::PlanResult* swap = nullptr;
    for (const planner::PlanResult& result : results) {
      if (result.policy == "swap") swap = &result;
    }
    if (flags->json) {
      nlohmann::json list = nlohmann::json::array();
      for (const planner::PlanResult& result : results) {
        list.push_back(ResultToJson(result, none, swap, workload->budget_bytes));
        if (bound_s.has_value() && result.feasible) {
          list.back()["gap_to_bound"] = result.best.step_time_s() / *bound_s - 1.0;
        }
      }
      out << list.dump(2) << "\n";
      return absl::OkStatus();
    }
    fmt::print(out, "{}\n", Header(*flags, *workload));
    fmt::print(out, "{:<15} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}{}\n",
               "policy", "arena", "step (s)", "overhead", "vs swap", "stall (s)", "to host", "back",
               "recompute", "plan (s)",
               bound_s.has_value() ? fmt::format(" {:>9}", "vs bound") : "");
    for (const planner::PlanResult& result : results) {
      if (!result.feasible) {
        fmt::print(out, "{:<15} infeasible: needs at least {}\n", result.policy,
                   FormatBytes(result.smallest_arena_bytes));
        continue;
      }
      const sim::SimulationResult& s = result.best.simulation;
      const std::string versus = swap != nullptr && swap->feasible
                                     ? Percent(swap->best.step_time_s() / s.step_time_s - 1.0)
                                     : "-";
      fmt::print(
          out, "{:<15} {:>10} {:>10.4g} {:>10} {:>9} {:>9.3g} {:>10} {:>10} {:>10} {:>9.2f}{}\n",
          result.policy, FormatBytes(result.best.arena_bytes()), s.step_time_s,
          Percent(s.step_time_s / none.best.step_time_s() - 1.0), versus, s.streams[0].stall_s,
          FormatBytes(s.d2h_bytes), FormatBytes(s.h2d_bytes),
          FormatCount(static_cast<double>(s.recompute_flops)) + "F", result.planning_s,
          bound_s.has_value() ? fmt::format(" {:>9}", Percent(s.step_time_s / *bound_s - 1.0))
                              : "");
    }
    for (const std::string& name : need_link) {
      fmt::print(out, "{:<15} not run: it spills, and there is no host link\n", name);
    }
    fmt::print(out, "\n'vs swap' is how much faster a step is than with swap (+: faster).\n");
    if (proven.has_value()) {
      fmt::print(out, "\n");
      PrintBound(out, *proven, std::nullopt);
      if (bound_s.has_value()) {
        fmt::print(out,
                   "'vs bound' is how much slower a step is than that bound: at most that far "
                   "from the best possible.\n");
      }
    }
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
